#!/bin/bash
# A pre-emptible job that survives its time limit (or pre-emption) by checkpointing and going
# back into the queue: `sbatch configs/sbatch-requeue.sh`.
#
#  1. 90 s before the limit Slurm sends SIGUSR1 to the job step (--signal=USR1@90; without the
#     B: prefix it goes to the srun tasks, i.e. ddprun, not to this script).
#  2. ddprun forwards SIGUSR1 to every worker (inside Slurm it does so by default; elsewhere
#     --signals-to-handle=SIGUSR1). ddp-train finishes its step, writes a checkpoint and exits
#     138 (128 + SIGUSR1); ddprun then exits 1.
#  3. This script sees the failure and requeues the job (same job id, SLURM_RESTART_COUNT + 1).
#     The new run's ddp-train finds the checkpoint in --checkpoint-dir and resumes from it.
#     (Any other failure is requeued too, at most MAX_REQUEUES times.)
#  Pre-emption by a higher-priority job (PreemptMode=REQUEUE) sends SIGTERM instead: ddprun
#  stops the workers (they checkpoint on SIGTERM too) within --stop-timeout (10 s), well inside
#  Slurm's KillWait, and Slurm requeues the job itself.
#SBATCH --job-name=ddp-requeue
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=01:00:00
#SBATCH --requeue
#SBATCH --signal=USR1@90
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -uo pipefail

DATA=${DATA:-/usr/share/datasets/fashion-mnist}
CKPT=${CKPT:-$HOME/checkpoints/$SLURM_JOB_NAME}
MAX_REQUEUES=${MAX_REQUEUES:-10}

echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"
srun ddprun --no-python ddp-train mnist --data "$DATA" --epochs 20 \
  --checkpoint-dir "$CKPT" --checkpoint-every 500
rc=$?
if [ $rc -ne 0 ] && [ "${SLURM_RESTART_COUNT:-0}" -lt "$MAX_REQUEUES" ]; then
  echo "stopped early (exit $rc): requeueing"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit $rc
