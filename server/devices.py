"""Where the job manager's workers run: one worker per GPU (each job's child pinned to it), or one on the CPU."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from trainer.capabilities import GpuInfo, visible_gpus
from trainer.cpu_share import CORES_VARIABLE, format_cores, split_cores
from trainer.errors import ConfigError, TrainerError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Slot:
    """One worker's place: what it is called, how a job's child is pinned there, and what a job records of it."""

    label: str  # "cpu", "GPU 0"
    env: dict[str, str] = field(default_factory=dict)  # overrides for the run's child process
    gpu: dict | None = None  # {"index", "uuid", "name"}, recorded in every job it runs


def server_slots(
    device_type: str, gpus: list[int] | None = None, find: Callable[[], list[GpuInfo]] = visible_gpus
) -> list[Slot]:
    """One slot per GPU this server may use (`gpus`: the instructor's NVML indices, None = all); one on a CPU.

    Two jobs on one CPU would share its cores and spoil both timings, so a CPU server keeps one worker.
    """
    if device_type != "cuda":
        return [Slot("cpu")]
    try:
        found = find()
    except TrainerError as err:
        if gpus is not None:
            raise ConfigError(f"the instructor's gpus setting cannot be applied: {err}") from None
        log.warning("one worker for all GPUs, jobs not pinned: %s", err)
        return [Slot("cuda")]
    if gpus is not None:
        indices = [gpu.index for gpu in found]
        missing = [index for index in gpus if index not in indices]
        if missing:
            raise ConfigError(
                f"AMP_LAB_GPUS (gpus) names GPU {missing[0]}, but this server's GPUs are "
                f"{', '.join(map(str, indices)) or 'none'}"
            )
        found = [gpu for gpu in found if gpu.index in gpus]
    if not found:
        return [Slot("cuda")]
    # Several jobs at once share the host's cores: each GPU's child gets its own block of them (its torch threads
    # and DataLoader workers stay there), so one learner's DataLoader-bound run does not slow another's.
    shares = split_cores(os.cpu_count() or 1, len(found)) if len(found) > 1 else [None] * len(found)
    return [
        Slot(f"GPU {gpu.index}", {"CUDA_VISIBLE_DEVICES": gpu.uuid, **({CORES_VARIABLE: format_cores(cores)}
                                                                       if cores else {})},
             {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name})
        for gpu, cores in zip(found, shares)
    ]
