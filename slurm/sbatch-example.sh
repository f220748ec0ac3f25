#!/bin/bash
# A training job that opts in to trainguard, without a site prolog: the batch script starts one
# exporter per node itself (srun --overlap) and then the training ranks.
#SBATCH --job-name=train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --exclusive
#SBATCH --requeue                      # trainguard recovers by requeueing: the job must allow it
#SBATCH --open-mode=append             # otherwise every requeue truncates the output file
#SBATCH --comment=trainguard:policy=default   # opt in; other jobs are only observed
#SBATCH --output=logs/%j/batch.log

set -euo pipefail
mkdir -p "logs/$SLURM_JOB_ID"
attempt=${SLURM_RESTART_COUNT:-0}       # trainguard's "attempt": resume from the newest checkpoint

# one exporter per node, beside the ranks; it names the workload from SLURM_JOB_ID/SLURM_RESTART_COUNT
srun --overlap --ntasks-per-node=1 --cpus-per-task=1 --mem=256M --kill-on-bad-exit=0 \
  trainguard exporter --cluster "${TRAINGUARD_CLUSTER:-cluster}" --scheduler slurm \
  --listen 0.0.0.0 --port 9481 --log "logs/$SLURM_JOB_ID/rank*.log" &

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000))
srun --kill-on-bad-exit=1 bash -c \
  'exec python train.py --resume-from-latest >> "logs/$SLURM_JOB_ID/rank$SLURM_PROCID.log" 2>&1'
