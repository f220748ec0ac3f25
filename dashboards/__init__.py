"""trainguard's Grafana dashboards as code: ``python -m dashboards.generate`` writes ``dashboards/json/``."""
