#!/usr/bin/env bash
# Build the wheel and sdist, install the wheel into a clean virtualenv outside the checkout, and run
# the export commands from there; promtool, amtool and systemd-analyze check what they write.
# Used by CI (.ci/run) and `make dist-check`; the same checks as tests/test_packaging.py, as commands.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d /tmp/trainguard-dist.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$python" -m build --no-isolation --outdir "$root/dist" "$root"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet -c "$root/constraints.txt" "$root"/dist/trainguard-*.whl
cd "$work"   # nothing below may come from the checkout
tg=$work/venv/bin/trainguard
"$tg" --version
"$tg" rules export --profile production > merged-rules.yml
promtool check rules merged-rules.yml
"$tg" rules export --profile production --out rules
"$tg" config example prometheus --profile production --rules-dir "$work/rules" --out prometheus.yml
promtool check config --syntax-only prometheus.yml
"$tg" config example alertmanager --profile production --out alertmanager.yml
"$tg" config example alertmanager-subroute --out alertmanager-subroute.yml
amtool check-config alertmanager.yml alertmanager-subroute.yml
amtool config routes test --config.file=alertmanager-subroute.yml --verify.receivers=trainguard-responder \
  alertname=TrainguardLogInfraGpu cluster=lab workload=7 host=n2
"$tg" dashboards export grafana
"$tg" config example responder --out trainguard.yaml
"$tg" config example file-sd --out targets/trainguard-exporter.json
"$tg" config example systemd --out units
systemd-analyze verify --man=no units/*.service units/*.timer
echo "dist-check: ok ($(ls "$root"/dist))"
