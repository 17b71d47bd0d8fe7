"""Reference results: comparisons recorded with the project's own command line, kept in reference/ as JSON, so a
learner sees real numbers before their own run finishes. Always shown labelled as reference, never mixed with runs:
reference_panel is the one way a page shows one (the only Streamlit here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from lessons.payoff import SweepRow, summarize_sweep
from lessons.verdicts import headline, machine_class
from trainer.comparison_table import precision_name
from trainer.config import AFTER_TRAINING
from trainer.environment import HardwareReport
from trainer.results import RunResult, compare
from ui import charts, server_bundle
from ui.identity import learner_id

REFERENCE_DIR = Path(__file__).resolve().parents[1] / "reference"
# What each reference in reference/index.json is for ("purpose"): the Run page's quick demo, or one batch size
# of a sweep for When AMP pays off.
PURPOSES = ("quick-demo", "sweep")


@dataclass(frozen=True)
class Reference:
    """One recorded comparison (fp32 first), how it was recorded, what to keep in mind reading it and what it is for
    (one of PURPOSES)."""

    baseline: RunResult
    candidate: RunResult
    command: str
    note: str
    purpose: str

    @property
    def machine(self) -> str:
        """The class of machine it was recorded on (lessons/verdicts.machine_class)."""
        return machine_class(self.baseline.environment)

    @property
    def speedup(self) -> float:
        """The baseline's training time over the candidate's."""
        return compare(self.baseline, self.candidate).speedup

    @property
    def own(self) -> bool:
        """The learner's own measurement (quick_demo_answer), not a recorded reference."""
        return self.note == OWN_DEMO_NOTE

    @property
    def answered_by(self) -> str:
        """Where this answer was measured, as a guess's record says it."""
        return "your own quick demo on this server" if self.own else f"a reference run on {self.machine}"

    @property
    def provenance(self) -> str:
        """The caption under an answer: whose measurement it is, and how it was made."""
        if self.own:
            return f"Measured in your own quick demo: {self.label}."
        return f"Measured in a reference run, not yours: {self.label}. {self.note}"

    @property
    def label(self) -> str:
        """Machine, date and settings in one line, e.g. 'AMD EPYC (2 cores, cpu) · 2026-11-30 · fp32 vs ...'."""
        env, config = self.baseline.environment, self.baseline.config
        machine = f"{env.get('device_name', '?')} ({env.get('logical_cores', '?')} cores, {env.get('device_type')})"
        date = self.baseline.started_at[:10] or "?"
        settings = (f"{precision_name(self.baseline.precision)} vs {precision_name(self.candidate.precision)}, "
                    f"{config.data} {config.subset or 'all'} images, {config.epochs} epoch(s), "
                    f"batch {config.batch_size}, {config.loader} loader, torch {env.get('torch_version')}")
        return f"{machine} · {date} · {settings}"


def machine_of(report: HardwareReport) -> dict:
    """This server's machine as an environment record, for load_references(like=...): what decides its class."""
    flags = (["amx_tile", "amx_bf16"] if report.cpu_amx else []) + (["avx512_bf16"] if report.cpu_bf16 else [])
    return {"device_type": report.device_type, "device_name": report.device_name, "cpu_flags": flags}


def this_machine() -> dict:
    """This server's machine (its hardware report) as an environment record."""
    return machine_of(server_bundle.hardware())


def this_machine_class() -> str:
    """This server's class of machine, as the questions and reference panels name it."""
    return machine_class(this_machine())


OWN_DEMO_NOTE = "Your own quick demo, on this server."


def quick_demo_answer() -> Reference | None:
    """What answers a quick-demo question: this learner's newest finished quick demo (their own measurement), else a
    reference recorded on a machine of this server's class; None before either."""
    mine = [job for job in server_bundle.job_manager().jobs_for_learner(learner_id())
            if job.spec.purpose == "quick-demo" and job.status == "done"]
    found = headline(mine[-1].results) if mine else None
    if found is not None:
        return Reference(found.baseline, found.candidate, "", OWN_DEMO_NOTE, "quick-demo")
    return next(iter(local_references("quick-demo")), None)


def local_references(purpose: str) -> list[Reference]:
    """The references recorded on a machine of this server's class (the only ones that answer for it)."""
    machine = this_machine()
    return load_references(device_type=machine["device_type"], purpose=purpose, like=machine)


def load_ladders(folder: Path = REFERENCE_DIR) -> list[dict]:
    """The ladders to the fastest lab run recorded with `python -m bench.ladder` or the GPU kit's step 7
    (reference/ladder-*.json), newest file name last; an unreadable one is left out."""
    ladders = []
    for path in sorted(folder.glob("ladder-*.json")):
        try:
            ladders.append({**json.loads(path.read_text(encoding="utf-8")), "file": path.name})
        except (OSError, ValueError):
            continue
    return ladders


def newest_ladders(folder: Path = REFERENCE_DIR, like: dict | None = None) -> list[dict]:
    """The newest ladder recorded on a machine of this server's class (`like`: its environment; default this
    server's), as every reference answers only for its own class; none where no such ladder is recorded."""
    machine = machine_class(like or this_machine())
    mine = [ladder for ladder in load_ladders(folder) if ladder.get("environment")
            and machine_class(ladder["environment"]) == machine]
    return mine[-1:]


def load_references(
    folder: Path = REFERENCE_DIR, device_type: str | None = None, purpose: str | None = None,
    like: dict | None = None,
) -> list[Reference]:
    """The references listed in folder/index.json (for `device_type` and `purpose` only, when given; with `like`, a
    machine's environment, only those recorded on a machine of its class: lessons/verdicts.machine_class), in the
    index's order. An entry whose purpose is not one of PURPOSES is an error in the index, named with its file."""
    index = folder / "index.json"
    if not index.exists():
        return []
    found = []
    for entry in json.loads(index.read_text(encoding="utf-8")):
        if entry.get("purpose") not in PURPOSES:
            raise ValueError(f"{index}: {entry['file']} has purpose {entry.get('purpose')!r}; "
                             f"choose one of {', '.join(PURPOSES)}")
        if purpose is not None and entry["purpose"] != purpose:
            continue
        recorded = json.loads((folder / entry["file"]).read_text(encoding="utf-8"))
        reference = Reference(RunResult.from_dict(recorded["baseline"]), RunResult.from_dict(recorded["candidate"]),
                              entry["command"], entry["note"], entry["purpose"])
        if device_type is not None and reference.baseline.environment.get("device_type") != device_type:
            continue
        if like is not None and machine_class(reference.baseline.environment) != machine_class(like):
            continue
        found.append(reference)
    return found


def reference_sweep(device_type: str, like: dict | None = None) -> list[Reference]:
    """The largest set of sweep references on this kind of device that differ in batch size alone, smallest batch
    first: a sweep recorded with `python -m trainer compare`, one batch size per call."""
    groups: dict[str, list[Reference]] = {}
    for reference in load_references(device_type=device_type, purpose="sweep", like=like):
        settings = {k: v for k, v in reference.baseline.config.to_dict().items()
                    if k != "batch_size" and k not in AFTER_TRAINING}
        machine = reference.baseline.environment.get("device_name")
        groups.setdefault(json.dumps([machine, reference.candidate.precision, settings], sort_keys=True), []).append(
            reference)
    sweeps = [g for g in groups.values() if len({r.baseline.config.batch_size for r in g}) >= 2]
    return sorted(max(sweeps, key=len, default=[]), key=lambda r: r.baseline.config.batch_size)


def reference_rows(references: list[Reference]) -> list[SweepRow]:
    """A reference sweep as the sweep's charts and table read it: one row per run, AMP's speedup beside fp32's."""
    return summarize_sweep([run for reference in references for run in (reference.baseline, reference.candidate)])


def reference_panel(reference: Reference) -> None:
    """One reference comparison, said not to be the learner's: machine, date and settings, the lab's table, what to
    keep in mind reading it and the command that recorded it."""
    st.markdown(f"**Reference, not yours:** {reference.label}")
    st.table(charts.comparison_table(reference.baseline, reference.candidate), hide_index=True)
    st.caption(reference.note)
    st.code(reference.command, language="bash")
