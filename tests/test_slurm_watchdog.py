"""``trainguard watchdog`` command line: configuration, exit codes (the release logic is in test_slurm_adapter
and, against a real Slurm, test_slurm_lab)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from responder.schedulers.slurm import watchdog

ROOT = Path(__file__).parent.parent


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    watchdog.add_parser(parser.add_subparsers())
    return parser.parse_args(["watchdog", *argv])


def test_defaults_and_handler() -> None:
    args = parse()
    assert args.handler is watchdog.run
    assert args.max_hold == watchdog.DEFAULT_MAX_HOLD_S
    assert args.interval == watchdog.DEFAULT_INTERVAL_S
    assert not args.once


@pytest.mark.parametrize("argv", [["--max-hold", "0"], ["--interval", "-1"], ["--once", "--interval", "5"]])
def test_bad_flags(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_reads_the_responder_config_example() -> None:
    settings = watchdog.load_settings(parse("--config", str(ROOT / "slurm" / "trainguard.yaml.example")))
    assert settings.cluster == "lab"
    assert settings.transport == "local"
    assert str(settings.slurm_conf) == "/etc/slurm/slurm.conf"


def test_config_forms(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text(
        "clusters:\n  a: {scheduler: {kind: slurm, command_timeout_s: 3}}\n  b: {scheduler: {kind: slurm}}\n"
        "  c: {scheduler: {kind: recording}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="--cluster"):
        watchdog.load_settings(parse("--config", str(two)))
    chosen = watchdog.load_settings(parse("--config", str(two), "--cluster", "a"))
    assert chosen.cluster == "a"
    assert chosen.command_timeout_s == 3
    with pytest.raises(ValueError, match="no Slurm scheduler"):
        watchdog.load_settings(parse("--config", str(two), "--cluster", "c"))
    section = tmp_path / "s.yaml"
    section.write_text("slurm: {transport: ssh, ssh_host: head1, cluster: x}\n", encoding="utf-8")
    assert watchdog.load_settings(parse("--config", str(section))).ssh_host == "head1"


def test_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slurm: {transport: carrier-pigeon}\n", encoding="utf-8")
    assert watchdog.run(parse("--once", "--config", str(bad)), io.StringIO()) == 2
    assert "transport" in capsys.readouterr().err


def test_slurm_unreachable_exits_1_with_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an empty slurm.conf: squeue fails at once (or is not installed); either way "unknown", exit 1
    conf = tmp_path / "slurm.conf"
    conf.write_text("", encoding="utf-8")
    config = tmp_path / "w.yaml"
    config.write_text(f"slurm: {{slurm_conf: {conf}, command_timeout_s: 2}}\n", encoding="utf-8")
    out = io.StringIO()
    assert watchdog.run(parse("--once", "--config", str(config)), out) == 1
    assert out.getvalue() == ""
    assert "slurm" in capsys.readouterr().err
