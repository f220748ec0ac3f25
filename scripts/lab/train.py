"""The lab's training job: real distributed data-parallel training with torch.distributed (gloo, CPU).

One process per Slurm task (rank = SLURM_PROCID, world = SLURM_NTASKS). A small MLP learns a fixed
random regression; gradients are averaged with all_reduce every step; rank 0 writes an atomic
checkpoint every ``--ckpt-every`` steps and the job resumes from the newest one after a requeue. The
trainguard progress hook reports each step and checkpoint.

Faults are injected from outside (trainguard/lab/faults.py), through signals and through control files
in ``--control-dir`` that the loop reads once per step:

  slow-r<R>        rank R sleeps this many extra seconds per step (a straggler)
  apperror         every rank raises an application error (CUDA-OOM-style message) at its next step
  line-r<R>        rank R prints the file's content to its log (an NCCL/CUDA error line), once
  die-r<R>         rank R exits with status 1 (after printing line-r<R>), as a process hit by that error
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from exporters import progress


def log(message: str) -> None:
    print(f"[rank{os.environ.get('SLURM_PROCID', '?')}] {message}", flush=True)


def latest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    return found[-1] if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--ckpt-every", type=int, default=10)
    parser.add_argument("--control-dir", type=Path, required=True)
    parser.add_argument("--step-time", type=float, default=0.2, help="minimum seconds per step")
    parser.add_argument("--timeout", type=float, default=20.0, help="collective timeout (gloo)")
    args = parser.parse_args()

    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + int(os.environ["SLURM_JOB_ID"]) % 1000))
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, init_method="env://", timeout=timedelta(seconds=args.timeout)
    )
    log(f"joined world of {world} on {os.environ.get('SLURMD_NODENAME')} "
        f"(job {os.environ['SLURM_JOB_ID']}, restart {os.environ.get('SLURM_RESTART_COUNT', '0')})")  # fmt: skip

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    target = torch.nn.Linear(32, 1)
    start = 0
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(args.ckpt_dir)
    if checkpoint is not None:
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        target.load_state_dict(state["target"])
        start = int(state["step"]) + 1
        log(f"resumed from checkpoint {checkpoint.name} at step {start}")

    batch = 64
    for step in range(start, args.steps):
        began = time.monotonic()
        inject(args.control_dir, rank)
        generator = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(batch, 32, generator=generator)
        with torch.no_grad():
            y = target(x)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        waited = time.monotonic()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= world
        waited = time.monotonic() - waited  # time in the collective: mostly waiting for the slowest rank
        optimizer.step()
        spent = time.monotonic() - began
        if spent < args.step_time:
            time.sleep(args.step_time - spent)
        # Report the rank's own busy time: under synchronous training every rank's wall time per step
        # is the slowest rank's, so only this tells a straggler apart.
        progress.step(step, samples=batch * world, duration=time.monotonic() - began - waited)
        print(f"step {step} loss {loss.item():.5f}", flush=True)
        if step % args.ckpt_every == 0 and step > start:
            if rank == 0:
                tmp = args.ckpt_dir / f".step-{step}.pt.tmp"
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "target": target.state_dict(), "step": step}, tmp)  # fmt: skip
                os.replace(tmp, args.ckpt_dir / f"step-{step}.pt")
            dist.barrier()
            progress.checkpoint_saved(step)
            log(f"checkpoint at step {step}")
    dist.destroy_process_group()
    return 0


def inject(control: Path, rank: int) -> None:
    slow = control / f"slow-r{rank}"
    if slow.exists():
        time.sleep(float(slow.read_text() or "1"))
    line = control / f"line-r{rank}"
    if line.exists():
        text = line.read_text()
        line.unlink(missing_ok=True)
        print(text, flush=True)
    die = control / f"die-r{rank}"
    if die.exists():
        die.unlink(missing_ok=True)  # one-shot: the next attempt's rank R must not die again
        raise SystemExit(1)
    if (control / "apperror").exists():
        print(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 79.11 GiB of which 1.20 GiB is free.",
            flush=True,
        )
        raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
