"""When does AMP pay off? Short timed runs over batch sizes (and widths), their summary and a verdict in words,
and where a run's time goes (waiting for data vs computing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from lessons.verdicts import DATA_BOUND_SHARE, DATA_NOTICEABLE_SHARE, PAYS_OFF_SPEEDUP
from trainer.results import RunResult, wait_share

# Memory figures in order of preference for the sweep's chart: what PyTorch allocated on a GPU, else the CPU's.
MEMORY_PREFERENCE = ("torch_max_allocated", "nvml_device_used", "torch_max_reserved", "process_rss_growth")
# Where a run's training time went, as the breakdown's chart stacks it and its sentence counts it.
COMPUTE_PART = "training compute"
WAIT_PART = "waiting for data"
WORKERS_PART = "workers' CPU on the same cores"


@dataclass
class SweepRow:
    """One run of a sweep, as the charts and the verdict read it."""

    precision: str
    batch_size: int
    width: int
    status: str  # ok | out of memory | failed | cancelled
    images_per_s: float | None  # steady state, warm-up excluded
    peak_memory_bytes: int | None
    memory_label: str | None  # which MEMORY_LABELS figure peak_memory_bytes is
    speedup: float | None = None  # AMP images/s over fp32's at the same batch and width; None for fp32
    error: str | None = None
    noisy_reason: str | None = None  # the first reason its timing quality was "noisy"; None when steady

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BreakdownRow:
    """How one run split its training time between waiting for the next batch and computing on it."""

    loader: str
    precision: str
    batch_size: int
    data_wait_s: float
    compute_s: float
    images_per_s: float | None
    # CPU runs only: the DataLoader workers' CPU seconds, taken from the cores the training computes on
    worker_cpu_s: float | None = None
    cores: int | None = None

    @property
    def data_share(self) -> float:
        return wait_share(self.data_wait_s, self.compute_s)

    @property
    def worker_share(self) -> float:
        """Share of the cores' time during training that the loader's workers used (0 without the figures)."""
        total = (self.data_wait_s + self.compute_s) * (self.cores or 0)
        return (self.worker_cpu_s or 0.0) / total if total > 0 else 0.0

    def parts(self) -> dict[str, float]:
        """The training time in seconds by where it went: waiting for data; on a CPU, the workers' CPU time over the
        cores (worker_share of it), taken out of the computing; the rest, training compute. A part's share of the
        total is the share the sentence gives."""
        total = self.data_wait_s + self.compute_s
        parts = {WAIT_PART: self.data_wait_s, COMPUTE_PART: self.compute_s}
        if self.worker_cpu_s is not None and self.cores:
            workers = self.worker_share * total
            # Workers busy while the loop waited too can exceed the computing: compute then shows as none.
            parts.update({COMPUTE_PART: max(0.0, self.compute_s - workers), WORKERS_PART: workers})
        return parts

    def to_dict(self) -> dict:
        return {**asdict(self), "data_share": self.data_share, "worker_share": self.worker_share,
                "parts": self.parts()}


# ---- the sweep -------------------------------------------------------------------------------------------


def summarize_sweep(outcomes: Iterable) -> list[SweepRow]:
    """One row per run (RunOutcome or RunResult), with AMP's speedup over fp32 at the same batch and width."""
    rows = [_sweep_row(item) for item in outcomes]
    fp32 = {(r.batch_size, r.width): r.images_per_s for r in rows if r.precision == "fp32" and r.images_per_s}
    for row in rows:
        baseline = fp32.get((row.batch_size, row.width))
        if row.precision != "fp32" and row.images_per_s and baseline:
            row.speedup = row.images_per_s / baseline
    return rows


def verdict(rows: Sequence[SweepRow], planned: int | None = None) -> str:
    """A sentence or two from the measured numbers: from which batch size on AMP pays off, if at all. With
    `planned` (the sweep's run count), no verdict until every run is in: a missing point could change it."""
    if planned is not None and len(rows) < planned:
        return (f"No verdict: only {len(rows)} of {planned} runs are in, and the verdict needs every batch size "
                "measured in both modes.")
    widths = sorted({r.width for r in rows})
    sentences = [_width_verdict([r for r in rows if r.width == w], w if len(widths) > 1 else None) for w in widths]
    failures = [r for r in rows if r.status != "ok"]
    if failures:
        listed = ", ".join(f"{r.precision} at batch {r.batch_size} ({r.status})" for r in failures)
        sentences.append(f"Some runs did not finish: {listed}.")
    noisy = [r for r in rows if r.noisy_reason]
    if noisy:
        listed = ", ".join(f"{r.precision} at batch {r.batch_size}" for r in noisy)
        sentences.append(
            f"Treat this as uncertain: {len(noisy)} run(s) were timed while the machine was busy ({listed}; "
            f"{noisy[0].noisy_reason}); run the sweep again when it is quiet."
        )
    return " ".join(sentences) if sentences else "The sweep has no finished runs yet."


def _width_verdict(rows: list[SweepRow], width: int | None) -> str:
    at = f"At width {width}, " if width is not None else "On this machine, "
    paired = sorted((r for r in rows if r.speedup is not None), key=lambda r: r.batch_size)
    if not paired:
        return at + "no batch size has both an fp32 and an AMP result, so there is nothing to compare yet."
    mode = paired[0].precision
    paying = [r for r in paired if r.speedup >= PAYS_OFF_SPEEDUP]
    if not paying:
        best = max(paired, key=lambda r: r.speedup)
        return (
            f"{at}{mode} did not pay off at any batch size tried: its best was {best.speedup:.2f}x fp32's "
            f"images/s, at batch {best.batch_size}."
        )
    first = paying[0]
    if paying == paired[paired.index(first):]:
        last = paired[-1]
        if first is last and len(paired) > 1:
            return (
                f"{at}{mode} pays off only at the largest batch tried, {last.batch_size} ({last.speedup:.2f}x "
                "fp32's images/s); at smaller batches it is no faster than fp32."
            )
        if first is paired[0]:
            return (
                f"{at}{mode} pays off at every batch size tried: {first.speedup:.2f}x fp32's images/s at batch "
                f"{first.batch_size}, {last.speedup:.2f}x at batch {last.batch_size}."
            )
        return (
            f"{at}{mode} pays off from batch {first.batch_size} on ({first.speedup:.2f}x fp32's images/s there, "
            f"{last.speedup:.2f}x at batch {last.batch_size}); below that it is no faster than fp32."
        )
    won = ", ".join(f"{r.batch_size} ({r.speedup:.2f}x)" for r in paying)
    lost = ", ".join(f"{r.batch_size} ({r.speedup:.2f}x)" for r in paired if r not in paying)
    return (
        f"{at}{mode} paid off at batch {won} but not at {lost}. Results that jump around like this mean the "
        "gain is within the run-to-run noise, or the machine was busy: run the sweep again before trusting it."
    )


def _sweep_row(item) -> SweepRow:
    result: RunResult | None = item if isinstance(item, RunResult) else item.result
    config = result.config if result is not None else item.config
    status = "ok" if result is not None and getattr(item, "status", "ok") == "ok" else _failure_status(item)
    label, peak = None, None
    if result is not None:
        label = next((name for name in MEMORY_PREFERENCE if name in result.peak_memory), None)
        peak = result.peak_memory.get(label) if label else None
    return SweepRow(
        precision=config.precision,
        batch_size=config.batch_size,
        width=config.width,
        status=status,
        images_per_s=result.steady_images_per_s if result is not None else None,
        peak_memory_bytes=peak,
        memory_label=label,
        error=getattr(item, "error", None),
        noisy_reason=_noisy_reason(result),
    )


def _noisy_reason(result: RunResult | None) -> str | None:
    quality = result.timing_quality if result is not None else None
    if not quality or quality.get("verdict") != "noisy":
        return None
    return (quality.get("reasons") or ["its throughput was not steady"])[0]


def _failure_status(outcome) -> str:
    if getattr(outcome, "error_kind", None) == "OutOfMemoryError":
        return "out of memory"
    return "cancelled" if getattr(outcome, "status", None) == "cancelled" else "failed"


# ---- where the time goes ---------------------------------------------------------------------------------


def summarize_breakdown(results: Iterable[RunResult]) -> list[BreakdownRow]:
    """Rows for the runs that carry a breakdown (RunConfig(breakdown=True))."""
    rows = []
    for result in results:
        if result.data_wait_s is None or result.compute_s is None:
            continue
        rows.append(
            BreakdownRow(
                loader=result.config.loader,
                precision=result.precision,
                batch_size=result.config.batch_size,
                data_wait_s=result.data_wait_s,
                compute_s=result.compute_s,
                images_per_s=result.steady_images_per_s or result.images_per_s,
                **_worker_cpu(result),
            )
        )
    return rows


def _worker_cpu(result: RunResult) -> dict:
    """On a CPU, the loader workers' CPU time and the cores it came from; on a GPU they do not compete with the
    training's arithmetic, so they are left out."""
    if result.environment.get("device_type") != "cpu" or result.worker_cpu_s is None:
        return {}
    return {"worker_cpu_s": result.worker_cpu_s, "cores": (result.timing_quality or {}).get("cores")}


def breakdown_sentence(rows: Sequence[BreakdownRow]) -> str:
    """Which part bounds each run, in words, and how much faster the resident loader made it."""
    if not rows:
        return "No run with a time breakdown yet."
    parts = [_bound_by(row) for row in rows]
    by_loader = {row.loader: row for row in rows}
    lab, resident = by_loader.get("dataloader"), by_loader.get("resident")
    if lab and resident and lab.images_per_s and resident.images_per_s:
        ratio = resident.images_per_s / lab.images_per_s
        parts.append(f"The resident loader trained at {ratio:.2f}x the DataLoader's images/s.")
    return " ".join(parts)


def _bound_by(row: BreakdownRow) -> str:
    name = "the lab's DataLoader" if row.loader == "dataloader" else f"the {row.loader} loader"
    share = f"{row.data_share:.0%} of the training time went to waiting for data"
    if row.worker_cpu_s is not None and row.cores:
        workers = (
            f"{share}, and its workers used {row.worker_cpu_s:.1f} s of CPU during {row.data_wait_s + row.compute_s:.1f} s "
            f"of training, {row.worker_share:.0%} of the {row.cores} cores' time, taken from the training's own "
            "arithmetic on the same cores"
        )
        if row.data_share + row.worker_share >= DATA_BOUND_SHARE:
            return f"With {name}, {workers}: the data pipeline, not arithmetic, bounds this run, so AMP cannot help much."
        if row.data_share + row.worker_share >= DATA_NOTICEABLE_SHARE:
            return f"With {name}, {workers}: compute bounds the run, but the data pipeline costs a noticeable part."
    if row.data_share >= DATA_BOUND_SHARE:
        return f"With {name}, {share}: the data pipeline, not arithmetic, bounds this run, so AMP cannot help much."
    if row.data_share >= DATA_NOTICEABLE_SHARE:
        return f"With {name}, {share}: compute bounds the run, but the data pipeline costs a noticeable part."
    return (f"With {name}, {share}: compute bounds this run, the part AMP can speed up where the hardware has fast "
            "16-bit units.")
