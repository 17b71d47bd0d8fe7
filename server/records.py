"""What the server passes around about jobs: what a learner asked for (JobSpec) and what a page may read (JobView)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.isolated import RunOutcome
from trainer.progress import Progress
from trainer.results import RunResult

JOB_KINDS = ("compare", "run", "sweep", "breakdown")
JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINISHED_STATUSES = ("done", "failed", "cancelled")
MAX_SWEEP_RUNS = 12  # a sweep is one job; the server takes at most this many runs in one
# A comparison repeats its pair (baseline, candidate) at most this often: each pair adds its time to the class's queue.
MAX_COMPARE_PAIRS = 3
RUNS_PER_KIND = {
    "compare": (2, 2 * MAX_COMPARE_PAIRS), "run": (1, 1), "sweep": (1, MAX_SWEEP_RUNS), "breakdown": (2, 2),
}  # (fewest, most)
MAX_LABEL_CHARS = 120
# What a job is for, as server/offer.py builds it, and how the console names each: the instructor turns each on or
# off and caps it per learner (server/kinds.py). "run" is a single run submitted outside the pages (a script).
JOB_PURPOSES = {
    "quick-demo": "quick demos",
    "comparison": "comparisons",
    "sweep": "batch-size sweeps",
    "breakdown": "time breakdowns",
    "tiny-fp16": "tiny amp-fp16 runs",
    "ablation": "scaler ablations",
    "safeguards": "runs without AMP's safeguards",
    "run": "single runs",
}
# A job recorded before purposes existed is what its kind was for.
PURPOSE_OF_KIND = {"compare": "comparison", "run": "run", "sweep": "sweep", "breakdown": "breakdown"}


@dataclass
class JobSpec:
    """What a learner asked for: a comparison (one pair of runs or up to MAX_COMPARE_PAIRS), a run, or a sweep."""

    kind: str  # compare | run | sweep | breakdown (one config timed with each loader)
    runs: list[RunConfig]  # executed in order, each in its own subprocess; a compare's alternate A B A B ...
    label: str = ""
    probe_max_batch: bool = False  # sweep on CUDA: also search the largest batch per precision
    purpose: str = ""  # one of JOB_PURPOSES; empty: what its kind is for

    def __post_init__(self) -> None:
        if not self.purpose:
            self.purpose = PURPOSE_OF_KIND.get(self.kind, self.kind)

    def check_shape(self) -> "JobSpec":
        """Raise ConfigError with one clear line for the first problem of the job as a whole (its kind, its runs'
        number and order, its label); return self. Each run's own settings are checked by the server's door
        (server/offer.py)."""
        if self.kind not in JOB_KINDS:
            raise ConfigError(f"unknown job kind {self.kind!r}: choose one of {', '.join(JOB_KINDS)}")
        if not isinstance(self.runs, list) or not all(isinstance(run, RunConfig) for run in self.runs):
            raise ConfigError("a job's runs must be a list of run settings")
        fewest, most = RUNS_PER_KIND[self.kind]
        if not fewest <= len(self.runs) <= most:
            wanted = f"{fewest} run{'s' if fewest > 1 else ''}" if fewest == most else f"{fewest} to {most} runs"
            if self.kind == "compare":
                wanted = f"2 runs (a baseline and a candidate) or up to {MAX_COMPARE_PAIRS} such pairs"
            raise ConfigError(f"a {self.kind} job needs {wanted}, got {len(self.runs)}")
        if self.kind == "compare":
            _check_alternating(self.runs)
        if not isinstance(self.label, str) or len(self.label) > MAX_LABEL_CHARS:
            raise ConfigError(f"a job label must be text of at most {MAX_LABEL_CHARS} characters")
        if self.purpose not in JOB_PURPOSES:
            raise ConfigError(f"unknown job purpose {self.purpose!r}: choose one of {', '.join(JOB_PURPOSES)}")
        return self

    @property
    def precisions(self) -> list[str]:
        """The precisions of the runs, in order, each once."""
        return list(dict.fromkeys(run.precision for run in self.runs))

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "runs": [run.to_dict() for run in self.runs],
            "label": self.label,
            "probe_max_batch": self.probe_max_batch,
            "purpose": self.purpose,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "JobSpec":
        return cls(
            kind=data["kind"],
            runs=[RunConfig.from_dict(run, stored=True) for run in data.get("runs", [])],
            label=data.get("label", ""),
            probe_max_batch=bool(data.get("probe_max_batch", False)),
            purpose=data.get("purpose", ""),
        )


def _check_alternating(runs: list[RunConfig]) -> None:
    """A comparison's runs are pairs, baseline then candidate, that differ in precision alone, repeated unchanged:
    only then is each pair's speedup about precision, and the pairs comparable with each other."""
    if len(runs) % 2:
        raise ConfigError(f"a compare job's runs come in pairs (baseline, candidate), got {len(runs)} runs")
    baseline, candidate = runs[0].to_dict(), runs[1].to_dict()
    differ = [name for name in baseline if name != "precision" and baseline[name] != candidate.get(name)]
    if differ:
        raise ConfigError(
            f"a compare job's baseline and candidate may differ only in precision, not in {', '.join(differ)}"
        )
    for index, run in enumerate(runs[2:], start=2):
        if run != runs[index % 2]:
            role = "baseline" if index % 2 == 0 else "candidate"
            raise ConfigError(
                f"run {index + 1} of a compare job must repeat the {role} (run {index % 2 + 1}) unchanged"
            )


@dataclass
class JobView:
    """A read-only snapshot of one job for the UI (changing it changes nothing on the server)."""

    id: str
    learner_id: str
    kind: str
    label: str
    status: str  # queued | running | done | failed | cancelled
    queue_position: int | None  # 1 = next to run; None when not queued
    estimated_wait_s: float | None  # until this job starts; None when unknown or not queued
    current_run: int  # index into spec.runs being executed
    progress: Progress | None  # latest progress of the current run
    live_losses: list[Sequence[dict]]  # per run: {"step", "epoch", "loss"} points seen so far
    outcomes: list[RunOutcome]  # each finished run, in order
    error: str | None
    spec: JobSpec
    created_at: float
    started_at: float | None
    finished_at: float | None
    extras: dict  # e.g. {"max_batch": {...}} for sweeps, "run_wall_s", "device_type"
    estimated_total_s: float | None = None  # whole job, estimated when it was submitted
    cancel_requested: bool = False
    remaining_s: float | None = None  # a running job: roughly how long until it ends (live only, not stored)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def results(self) -> list[RunResult]:
        """Results of the runs that finished successfully, in run order."""
        return [o.result for o in self.outcomes if o.status == "ok" and o.result is not None]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "learner_id": self.learner_id,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "queue_position": self.queue_position,
            "estimated_wait_s": self.estimated_wait_s,
            "current_run": self.current_run,
            "progress": self.progress.to_dict() if self.progress else None,
            "live_losses": self.live_losses,
            "outcomes": [outcome.to_dict() for outcome in self.outcomes],
            "error": self.error,
            "spec": self.spec.to_dict(),
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "extras": self.extras,
            "estimated_total_s": self.estimated_total_s,
            "cancel_requested": self.cancel_requested,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "JobView":
        progress = data.get("progress")
        return cls(
            id=data["id"],
            learner_id=data["learner_id"],
            kind=data["kind"],
            label=data.get("label", ""),
            status=data["status"],
            queue_position=data.get("queue_position"),
            estimated_wait_s=data.get("estimated_wait_s"),
            current_run=data.get("current_run", 0),
            progress=Progress.from_dict(progress) if progress else None,
            live_losses=data.get("live_losses", []),
            outcomes=[RunOutcome.from_dict(outcome) for outcome in data.get("outcomes", [])],
            error=data.get("error"),
            spec=JobSpec.from_dict(data["spec"]),
            created_at=data["created_at"],
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            extras=data.get("extras", {}),
            estimated_total_s=data.get("estimated_total_s"),
            cancel_requested=bool(data.get("cancel_requested", False)),
        )
