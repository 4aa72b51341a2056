#!/bin/bash
# One node, 4 GPUs: `sbatch configs/sbatch-1node-4gpu.sh train.py --epochs 10`.
# ddprun reads the allocation itself: 4 workers (the step's GPUs), run id = job.step, no
# rendezvous flags. One srun task on the node, so ddprun is the agent (restarts on failure).
#SBATCH --job-name=ddp-1x4
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=02:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

srun ddprun --max-restarts=2 "$@"
