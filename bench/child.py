"""One benchmark configuration in a fresh process: `python -m bench.child` reads a spec (JSON) on stdin and
prints one JSON line with the measured figures, so that no run inherits another's caches, threads or memory.
"""

from __future__ import annotations

import json
import sys

import torch

from bench.plain_loop import train_plain
from trainer import host_malloc
from trainer.config import RunConfig
from trainer.loaders import load_split
from trainer.progress import Progress
from trainer.run import run_training

IMPLEMENTATIONS = ("plain", "trainer")


def run_plain(spec: dict) -> dict:
    split = load_split(spec["data"], spec["data_root"], train=True, limit=spec["subset"], seed=spec["seed"],
                       download=False)
    result = train_plain(
        split,
        precision=spec["precision"],
        loader=spec["loader"],
        batch_size=spec["batch_size"],
        device=torch.device(spec["device"]),
        epochs=spec["epochs"],
        warmup_steps=spec["warmup_steps"],
        channels_last=spec["channels_last"],
        num_workers=spec["num_workers"],
        seed=spec["seed"],
        tune_malloc=spec["malloc"] == "tuned",
    )
    return {
        "tuned_malloc": result.tuned_malloc,
        "images_per_s": result.images_per_s,
        "total_time_s": result.total_time_s,
        "total_steps": result.total_steps,
        "warmup_steps": result.warmup_steps,
        "final_loss": result.final_loss,
    }


def run_trainer(spec: dict) -> dict:
    # The spec names RunConfig's fields, and two of the bench's own: the implementation, and the allocator spelled
    # as the table's column.
    settings = {key: value for key, value in spec.items() if key not in ("implementation", "malloc")}
    config = RunConfig.from_dict({**settings, "tune_host_malloc": spec["malloc"] == "tuned"})
    latest: list[Progress] = []

    def keep_latest(progress: Progress) -> None:
        latest[:] = [progress]

    # A real, if cheap, progress consumer and cancel check, so the trainer runs the way the app drives it.
    result = run_training(config, on_progress=keep_latest, should_cancel=lambda: False)
    return {
        "tuned_malloc": host_malloc.state().tuned,
        "images_per_s": result.steady_images_per_s,
        "total_time_s": result.total_time_s,
        "total_steps": result.total_steps,
        "warmup_steps": result.warmup_steps,
        "test_accuracy": result.test_accuracy,
        "warnings": list(result.warnings),
    }


def main() -> int:
    spec = json.loads(sys.stdin.read())
    if spec["implementation"] not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {spec['implementation']!r}: choose one of {IMPLEMENTATIONS}")
    measured = run_plain(spec) if spec["implementation"] == "plain" else run_trainer(spec)
    # The last stdout line is the answer; anything printed before it (trainer progress) is ignored.
    print(json.dumps(measured), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
