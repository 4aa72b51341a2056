#!/bin/bash
# Two nodes x 4 GPUs, one world of 8: `sbatch configs/sbatch-2node-4gpu.sh train.py`.
# Each node's ddprun takes the node count (2) from the step, its node rank from SLURM_NODEID and
# the rendezvous endpoint from the step's first host (the agent there serves it) with a port
# derived from the job id: no MASTER_ADDR arithmetic, no `scontrol show hostnames`.
#SBATCH --job-name=ddp-2x4
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=04:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

# The same as: ddprun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d \
#   --rdzv-endpoint=FIRST_HOST:PORT --rdzv-id=$SLURM_JOB_ID.$SLURM_STEP_ID --node-rank=$SLURM_NODEID
srun ddprun --max-restarts=3 "$@"
