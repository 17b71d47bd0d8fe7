"""Reference results: comparisons recorded with the project's own command line, kept in reference/ as JSON, so a
learner sees real numbers before their own run finishes. Always shown labelled as reference, never mixed with runs.
No Streamlit here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainer.comparison_table import precision_name
from trainer.results import RunResult

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "reference"


@dataclass(frozen=True)
class Reference:
    """One recorded comparison (fp32 first), how it was recorded, and what to keep in mind reading it."""

    baseline: RunResult
    candidate: RunResult
    command: str
    note: str

    @property
    def label(self) -> str:
        """Machine, date and settings in one line, e.g. 'AMD EPYC (2 cores, cpu) · 2026-11-30 · fp32 vs ...'."""
        env, config = self.baseline.environment, self.baseline.config
        machine = f"{env.get('device_name', '?')} ({env.get('logical_cores', '?')} cores, {env.get('device_type')})"
        date = self.baseline.started_at[:10] or "?"
        settings = (f"{precision_name(self.baseline.precision)} vs {precision_name(self.candidate.precision)}, "
                    f"{config.get('data')} {config.get('subset') or 'all'} images, {config.get('epochs')} epoch(s), "
                    f"batch {config.get('batch_size')}, {config.get('loader')} loader, torch {env.get('torch_version')}")
        return f"{machine} · {date} · {settings}"


def load_references(folder: Path = REFERENCE_DIR, device_type: str | None = None) -> list[Reference]:
    """The references listed in folder/index.json (for `device_type` only, when given), in the index's order."""
    index = folder / "index.json"
    if not index.exists():
        return []
    found = []
    for entry in json.loads(index.read_text(encoding="utf-8")):
        recorded = json.loads((folder / entry["file"]).read_text(encoding="utf-8"))
        reference = Reference(RunResult.from_dict(recorded["baseline"]), RunResult.from_dict(recorded["candidate"]),
                              entry["command"], entry["note"])
        if device_type is None or reference.baseline.environment.get("device_type") == device_type:
            found.append(reference)
    return found
