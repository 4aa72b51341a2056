#!/bin/bash
# CPU only, two nodes x 2 workers (gloo): `sbatch configs/sbatch-2node-cpu.sh`.
# Without GPUs in the step ddprun would start one worker per node; ask for 2 explicitly.
#SBATCH --job-name=ddp-cpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out
set -euo pipefail

DATA=${DATA:-/usr/share/datasets/fashion-mnist}
srun ddprun --nproc-per-node=2 --no-python ddp-train mnist --data "$DATA" --epochs 1 \
  --backend gloo --device cpu
