"""Build step: copy what a deployment needs into the wheel, under ``trainguard/_assets/``.

The alert rules, dashboards and Slurm files live at the top of the repository (their fixed layout);
``trainguard.assets`` finds them there in a checkout and under ``_assets`` in an installed wheel.
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# Kept in step with trainguard/assets.py (ASSET_DIRS) and MANIFEST.in.
ASSETS = {
    "alert_rules": ("*.yml", "alertmanager/*.yml", "profiles/*.yml", "prometheus/*.yml", "tests/*.yml"),
    "dashboards": ("json/*.json", "provisioning/*/*.yaml"),
    "slurm": ("*.sh", "*.example", "systemd/*", "deploy/*"),
}


class BuildWithAssets(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        for name, patterns in ASSETS.items():
            for pattern in patterns:
                for src in sorted((ROOT / name).glob(pattern)):
                    if src.is_file() and src.name != "lab.sh":
                        dest = Path(self.build_lib) / "trainguard" / "_assets" / name / src.relative_to(ROOT / name)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(src, dest)


setup(cmdclass={"build_py": BuildWithAssets})
