# A worker written for torch.distributed.launch without --use_env, as the seeds' users write it:
# the local rank comes as an argument that argparse parses: --local_rank (torch 1.x launch) or
# --local-rank (torch 2.x launch), both accepted as torch's documentation recommends.
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=-1)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
print(f"arg_local_rank={args.local_rank} env_local_rank={os.environ['LOCAL_RANK']} "
      f"epochs={args.epochs}", flush=True)
