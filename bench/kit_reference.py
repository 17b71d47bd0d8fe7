"""The GPU kit's reference results: comparisons it measured anyway, written in the format of the project's
reference/ folder (each file as `python -m trainer compare --json` writes it, and index.json's entries), so that
committing them is one copy.

The kit writes them under its output folder, in `reference/`, with an `index.json` that lists only these files:
copy the files into the project's reference/ and add the entries to its index.json.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, fields
from pathlib import Path

from trainer.config import RunConfig
from trainer.results import RunResult, compare, speedup_interval

FOLDER = "reference"  # under the kit's --out
INDEX = "index.json"
# RunConfig's fields as `python -m trainer compare` spells them (trainer/cli.py); a run that set any other field
# away from its default has no faithful command, and says so.
OPTIONS = {"epochs": "--epochs", "batch_size": "--batch-size", "data": "--data", "loader": "--loader",
           "subset": "--subset", "test_subset": "--test-subset", "width": "--width", "device": "--device",
           "seed": "--seed", "num_workers": "--workers", "log_every": "--log-every",
           "warmup_steps": "--warmup-steps", "min_steady_s": "--min-steady-s", "profile_steps": "--profile-steps",
           "compile_mode": "--compile-mode"}
SWITCHES = {"channels_last": "--channels-last", "cudnn_benchmark": "--cudnn-benchmark", "breakdown": "--breakdown",
            "measure_peaks": "--measure-peaks"}
# Not settings of the comparison: for synthetic data data_root only says where a prepared copy of the split was read
# (the same pixels: trainer/synthetic.py); peaks_cache where the server keeps measured device peaks; the precision is
# the pair's own.
NOT_SPELT = ("precision", "data_root", "peaks_cache")


@dataclass(frozen=True)
class KitReference:
    """One comparison the kit measured, fp32 first, and what it is for (ui/reference.py's PURPOSES)."""

    name: str  # the file name's tail: quick-demo, sweep-batch256, ...
    purpose: str  # quick-demo | sweep
    baseline: RunResult
    candidate: RunResult
    note: str


def compare_payload(baseline: RunResult, candidate: RunResult) -> dict:
    """One pair of runs as `python -m trainer compare --json` writes it, the runs in the order they started."""
    ran = sorted((baseline, candidate), key=lambda run: run.started_at)
    return {
        "baseline": baseline.to_dict(),
        "candidate": candidate.to_dict(),
        "comparison": compare(baseline, candidate).to_dict(),
        "speedup": speedup_interval([baseline], [candidate]).to_dict(),
        "order": [run.precision for run in ran],
        "runs": [run.to_dict() for run in ran],
    }


def compare_command(baseline: RunConfig, candidate: RunConfig, json_path: str) -> str:
    """The `python -m trainer compare` call that runs this pair with the same settings; ValueError when the two runs'
    settings differ beyond their precision, or when they set something the command line cannot say."""
    differ = [item.name for item in fields(RunConfig) if item.name not in NOT_SPELT
              and getattr(baseline, item.name) != getattr(candidate, item.name)]
    if differ:
        raise ValueError(f"not a comparison: the two runs' {', '.join(differ)} differ")
    default = RunConfig()
    args = ["python", "-m", "trainer", "compare", "--amp", candidate.precision]
    for item in fields(RunConfig):
        name, value = item.name, getattr(baseline, item.name)
        if name in NOT_SPELT or value == getattr(default, name):
            continue
        if name in SWITCHES and value is True:
            args.append(SWITCHES[name])
        elif name in OPTIONS:
            args += [OPTIONS[name], str(value)]
        else:
            raise ValueError(f"the run's {name}={value!r} has no option in python -m trainer compare")
    return shlex.join([*args, "--json", json_path])


def file_name(device_type: str, date: str, name: str) -> str:
    """As reference/ names its files: cpu-2026-11-30-quick-demo.json."""
    return f"{device_type}-{date}-{name}.json"


def write_references(out: Path, device_type: str, date: str,
                     references: list[KitReference]) -> tuple[list[str], list[str]]:
    """Each reference's file under out/reference/ and an index.json listing them: the file names written, and why
    any other was not (one line each)."""
    folder = Path(out) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    entries, problems = [], []
    for reference in references:
        name = file_name(device_type, date, reference.name)
        try:
            command = compare_command(reference.baseline.config, reference.candidate.config, f"{FOLDER}/{name}")
        except ValueError as err:
            problems.append(f"{name} not written: {err}")
            continue
        payload = compare_payload(reference.baseline, reference.candidate)
        (folder / name).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        entries.append({"file": name, "purpose": reference.purpose, "command": command, "note": reference.note})
    (folder / INDEX).write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    return [entry["file"] for entry in entries], problems
