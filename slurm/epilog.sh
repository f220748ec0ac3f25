#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/trainguard-epilog.sh): stop the job's exporter on this
# node. Never fails (a failing epilog drains the node).
job=${SLURM_JOB_ID:-}
[[ "$job" =~ ^[1-9][0-9]{0,9}$ ]] || exit 0
systemctl stop "trainguard-exporter-$job.service" 2>/dev/null || true
exit 0
