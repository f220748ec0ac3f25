#!/usr/bin/env bash
# `make doctor`: is this machine ready for `make install`, `make test` and `make demo`? Checks each
# prerequisite of README.md ("Prerequisites") and says what to install for the missing ones.
# Exit 0 when everything for `make install` and `make test-fast` is there (the rest only warns).
set -u
missing=0
ok() { printf '  ok       %s\n' "$1"; }
need() { printf '  MISSING  %s: %s\n' "$1" "$2"; missing=1; }
want() { printf '  missing  %s: %s (needed by %s)\n' "$1" "$2" "$3"; }
has() { command -v "$1" >/dev/null 2>&1; }

echo "make install / make test-fast:"
if has python3 && python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then ok "python3 >= 3.11 ($(python3 -V 2>&1))"
else need "python3 >= 3.11" "apt-get install python3 (Debian 12 has 3.11)"; fi
if python3 -c 'import ensurepip, venv' 2>/dev/null; then ok "python3-venv"; else need "python3-venv" "apt-get install python3-venv"; fi
has make && ok make || need make "apt-get install make"

echo "make test (real services; missing ones are skipped with the reason):"
for tool in prometheus:prometheus promtool:prometheus prometheus-alertmanager:prometheus-alertmanager amtool:prometheus-alertmanager \
            sbatch:slurm-wlm slurmctld:slurmctld munged:munge systemd-analyze:systemd; do
  has "${tool%%:*}" && ok "${tool%%:*}" || want "${tool%%:*}" "apt-get install ${tool#*:}" "make test, make demo"
done
if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || has initdb; then ok "PostgreSQL (initdb)"
else want PostgreSQL "apt-get install postgresql" "the store contract and replica failover tests, bench/ha.py"; fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  want "user postgres" "apt-get install postgresql (it creates the user)" "PostgreSQL tests as root"; fi
has vmalert && ok vmalert || want vmalert "apt-get install victoria-metrics" "the vmalert rules test, bench/fleet"
if has chromium || has chromium-browser; then ok chromium; else want chromium "apt-get install chromium" "the console browser tests"; fi
if [ -d dashboards/logql/node_modules ]; then ok "LogQL grammar (npm)"
elif has npm; then want "LogQL grammar" "npm ci --prefix dashboards/logql" "the dashboard LogQL checks"
else want "npm and the LogQL grammar" "apt-get install npm; npm ci --prefix dashboards/logql" "the dashboard LogQL checks"; fi

echo "make demo (root, CPU PyTorch):"
[ "$(id -u)" = 0 ] && ok "root" || want root "run as root" "make demo, the Slurm tests"
if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch' 2>/dev/null; then
  ok "torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
else want torch "make install-lab TORCH_INDEX=https://download.pytorch.org/whl/cpu" "make demo"; fi
[ "$missing" = 0 ] && echo "ready for make install" || echo "install the MISSING items first"
exit "$missing"
