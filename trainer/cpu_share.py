"""A run's share of the host's CPU cores, when a server runs several jobs at once (one per GPU).

Each job's child is told its cores in AMP_LAB_CPU_CORES ("0-7" or "0,2,4"); the child pins itself to them, runs
torch's intra-op threads on them alone, and gives its DataLoader at most one worker per core but one (the training
loop's own thread keeps a core; one worker at least). Without the variable nothing changes: the run has the whole
machine. What a run was given is recorded with its environment, so that a learner reads the workers it really had.
"""

from __future__ import annotations

import os

import torch

CORES_VARIABLE = "AMP_LAB_CPU_CORES"


def parse_cores(text: str) -> list[int]:
    """"0-3,8" -> [0, 1, 2, 3, 8]; ValueError (one line) for anything else."""
    cores: set[int] = set()
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise ValueError(f"{CORES_VARIABLE}={text!r} is not a list of cores such as 0-7 or 0,2,4") from None
        if first < 0 or last < first:
            raise ValueError(f"{CORES_VARIABLE}={text!r} has an empty or negative range: {part}")
        cores.update(range(first, last + 1))
    if not cores:
        raise ValueError(f"{CORES_VARIABLE}={text!r} names no core")
    return sorted(cores)


def format_cores(cores: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    ranges, start = [], None
    for index, core in enumerate(cores):
        if start is None:
            start = core
        if index + 1 == len(cores) or cores[index + 1] != core + 1:
            ranges.append(f"{start}" if start == core else f"{start}-{core}")
            start = None
    return ",".join(ranges)


def split_cores(total: int, slots: int) -> list[list[int]]:
    """`total` cores dealt to `slots` workers in contiguous blocks, the remainder to the first ones; with more
    workers than cores, each gets one (shared)."""
    if slots <= 1 or total <= 0:
        return [list(range(max(total, 1)))]
    size, extra = divmod(total, slots)
    blocks, start = [], 0
    for slot in range(slots):
        count = max(1, size + (1 if slot < extra else 0))
        blocks.append([(start + offset) % total for offset in range(count)])
        start = (start + count) % total
    return blocks


def apply_share() -> list[int] | None:
    """Pin this process and torch's threads to the cores AMP_LAB_CPU_CORES names; None when it names none (or the
    platform cannot pin, in which case only the thread count follows the share)."""
    text = os.environ.get(CORES_VARIABLE)
    if not text:
        return None
    cores = parse_cores(text)
    try:
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError):
        pass  # no affinity on this platform, or cores it does not have: the thread count still holds
    torch.set_num_threads(len(cores))
    return cores


def loader_workers(asked: int, cores: list[int] | None) -> int:
    """The DataLoader workers a run gets: what it asked for, at most one per core of its share but one (and at
    least one, if it asked for any: a share of one core still loads in a worker, as the lab's loop does)."""
    if cores is None or asked == 0:
        return asked
    return min(asked, max(len(cores) - 1, 1))
