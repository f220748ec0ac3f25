#!/bin/bash
# The lab's batch script: one training rank per node, each logging to its node's log directory and
# reporting progress to its node's progress directory (what a node-local exporter sees).
# scripts/lab/stackup.py submits it with LAB_ROOT, LAB_REPO, LAB_PYTHON and LAB_STEPS exported
# (Slurm runs a copy of this file from its spool directory, so nothing here is found relative to it).
set -u
echo "job ${SLURM_JOB_ID} attempt ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST} at $(date +%T.%N)"
mkdir -p "${LAB_ROOT}/control/${SLURM_JOB_ID}"
# --kill-on-bad-exit: when one rank dies the step ends at once, as torchrun would end the job.
# One log file per attempt: the exporter ties a log stream to the one rank identity that writes it, so a
# file appended to by two attempts would have none (its lines would carry no workload labels).
exec srun --kill-on-bad-exit=1 bash -c '
  exec >>"${LAB_ROOT}/logs/${SLURMD_NODENAME}/job${SLURM_JOB_ID}-a${SLURM_RESTART_COUNT:-0}-rank${SLURM_PROCID}.log" 2>&1
  export TRAINGUARD_PROGRESS_DIR="${LAB_ROOT}/progress/${SLURMD_NODENAME}" TRAINGUARD_PROGRESS_INTERVAL=0.2
  export PYTHONPATH="${LAB_REPO}"
  exec "${LAB_PYTHON}" -W ignore "${LAB_REPO}/scripts/lab/train.py" \
    --ckpt-dir "${LAB_ROOT}/ckpt/${SLURM_JOB_ID}" --control-dir "${LAB_ROOT}/control/${SLURM_JOB_ID}" \
    --steps "${LAB_STEPS}"'
