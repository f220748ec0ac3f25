#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/trainguard-prolog.sh, PrologFlags=Alloc): start one
# trainguard exporter for the job on this node, as a transient systemd unit that the epilog stops.
# Runs as root on every node of the allocation, before the job starts. Only jobs that opted in
# (--comment=trainguard:policy=...) get an exporter. A prolog that fails drains the node, so every
# failure here is logged and swallowed: monitoring must never take a node out.
#
# Site settings: TRAINGUARD_CLUSTER (cluster label), TRAINGUARD_BIN, TRAINGUARD_LOG_GLOB (training
# logs, may use %j for the job id), TRAINGUARD_EXPORTER_PORT. Set them in /etc/default/trainguard.
set -u
[[ -r /etc/default/trainguard ]] && . /etc/default/trainguard
: "${TRAINGUARD_CLUSTER:=cluster}" "${TRAINGUARD_BIN:=/opt/trainguard/venv/bin/trainguard}"
: "${TRAINGUARD_EXPORTER_PORT:=9481}" "${TRAINGUARD_LOG_GLOB:=/shared/logs/%j/*.log}"

job=${SLURM_JOB_ID:-}
[[ "$job" =~ ^[1-9][0-9]{0,9}$ ]] || exit 0
info=$(scontrol show job -o "$job" 2>/dev/null || true)
[[ "$info" == *" Comment=trainguard:policy="* || "$info" == *" Comment="*" trainguard:policy="* ]] || exit 0
attempt=$(grep -o ' Restarts=[0-9]*' <<<"$info" | head -1 | cut -d= -f2)
node=${SLURMD_NODENAME:-$(hostname -s)}
logs=${TRAINGUARD_LOG_GLOB//%j/$job}

systemd-run --quiet --collect --unit="trainguard-exporter-$job" \
  --property=Restart=on-failure --property=MemoryMax=256M --property=CPUQuota=20% \
  "$TRAINGUARD_BIN" exporter --cluster "$TRAINGUARD_CLUSTER" --node "$node" \
  --workload "$job" --scheduler slurm --attempt "${attempt:-0}" \
  --listen 0.0.0.0 --port "$TRAINGUARD_EXPORTER_PORT" --log "$logs" --kernel-log /dev/kmsg \
  || logger -t trainguard-prolog "job $job: could not start the exporter"
exit 0
