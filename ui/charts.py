"""Altair charts and the lab's results table, built from RunResults.

No Streamlit here: every builder returns a plain Altair chart or DataFrame, so tests can check them alone.
Runs come in as an ordered mapping {label: RunResult}; the first one is the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import altair as alt
import pandas as pd

from trainer.results import LAB_REFERENCE, MEMORY_LABELS, RunResult, compare

PRECISION_NAMES = {"fp32": "FP32", "tf32": "TF32", "amp-fp16": "AMP (fp16)", "amp-bf16": "AMP (bf16)"}

# Short names for chart axes; MEMORY_LABELS holds the full description for tooltips and tables.
MEMORY_SHORT_NAMES = {
    "torch_max_allocated": "PyTorch allocated",
    "torch_max_reserved": "PyTorch reserved",
    "nvml_device_used": "GPU in use (nvidia-smi)",
    "process_rss_growth": "Process RSS growth",
}


def precision_name(precision: str) -> str:
    return PRECISION_NAMES.get(precision, precision)


def run_labels(results: Sequence[RunResult]) -> dict[str, RunResult]:
    """Label runs by precision, numbering repeats, so that two fp32 runs stay apart in a chart."""
    labelled: dict[str, RunResult] = {}
    for result in results:
        label = precision_name(result.precision)
        number = 2
        while label in labelled:
            label = f"{precision_name(result.precision)} #{number}"
            number += 1
        labelled[label] = result
    return labelled


def format_bytes(count: float) -> str:
    """Decimal units, as the lab writes its 1.8 GB."""
    if count >= 1e9:
        return f"{count / 1e9:.2f} GB"
    if count >= 1e6:
        return f"{count / 1e6:.0f} MB"
    return f"{count / 1e3:.0f} kB"


def format_seconds(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def speed_change(baseline_s: float, candidate_s: float) -> str:
    """'1.56x faster (36% less time)' or '2.10x slower (110% more time)'."""
    if candidate_s <= 0 or baseline_s <= 0:
        return "n/a"
    ratio = baseline_s / candidate_s
    saved = 100.0 * (baseline_s - candidate_s) / baseline_s
    if ratio >= 1:
        return f"{ratio:.2f}x faster ({saved:.0f}% less time)"
    return f"{1 / ratio:.2f}x slower ({-saved:.0f}% more time)"


def _color(labels: Sequence[str]) -> alt.Color:
    return alt.Color("run:N", title="Run", scale=alt.Scale(domain=list(labels)), sort=list(labels))


def time_chart(runs: Mapping[str, RunResult]) -> alt.LayerChart:
    """Total training time per run as bars, each labelled with its change against the first run."""
    labels = list(runs)
    base = runs[labels[0]].total_time_s if labels else 0.0
    rows = [
        {
            "run": label,
            "seconds": result.total_time_s,
            "epochs": result.config.get("epochs"),
            "change": "baseline" if i == 0 else speed_change(base, result.total_time_s),
        }
        for i, (label, result) in enumerate(runs.items())
    ]
    frame = pd.DataFrame(rows, columns=["run", "seconds", "epochs", "change"])
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("run:N", title=None, sort=labels, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("seconds:Q", title="Total training time (s)"),
            color=_color(labels),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("seconds:Q", title="Training time (s)", format=".2f"),
                alt.Tooltip("epochs:Q", title="Epochs"),
                alt.Tooltip("change:N", title="Against the baseline"),
            ],
        )
    )
    text = bars.mark_text(dy=-8).encode(text="change:N")
    return alt.layer(bars, text).properties(title="Total training time")


def memory_chart(runs: Mapping[str, RunResult]) -> alt.Chart:
    """Peak memory per figure (grouped bars, one per run), in MB."""
    labels = list(runs)
    rows = []
    for label, result in runs.items():
        for key, count in result.peak_memory.items():
            rows.append(
                {
                    "run": label,
                    "figure": MEMORY_SHORT_NAMES.get(key, key),
                    "description": MEMORY_LABELS.get(key, key),
                    "megabytes": count / 1e6,
                }
            )
    frame = pd.DataFrame(rows, columns=["run", "figure", "description", "megabytes"])
    return (
        alt.Chart(frame, title="Peak memory")
        .mark_bar()
        .encode(
            x=alt.X("figure:N", title=None, axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("run:N", sort=labels),
            y=alt.Y("megabytes:Q", title="Peak memory (MB)"),
            color=_color(labels),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("description:N", title="Figure"),
                alt.Tooltip("megabytes:Q", title="MB", format=",.1f"),
            ],
        )
    )


def epoch_time_chart(runs: Mapping[str, RunResult]) -> alt.Chart:
    """Seconds per epoch, one line per run: the first epoch often carries the warm-up."""
    labels = list(runs)
    rows = [
        {"run": label, "epoch": epoch, "seconds": seconds}
        for label, result in runs.items()
        for epoch, seconds in enumerate(result.epoch_times_s, start=1)
    ]
    frame = pd.DataFrame(rows, columns=["run", "epoch", "seconds"])
    return (
        alt.Chart(frame, title="Time per epoch")
        .mark_line(point=True)
        .encode(
            x=alt.X("epoch:O", title="Epoch", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("seconds:Q", title="Seconds"),
            color=_color(labels),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("epoch:O", title="Epoch"),
                alt.Tooltip("seconds:Q", title="Seconds", format=".2f"),
            ],
        )
    )


def loss_series(runs: Mapping[str, RunResult]) -> dict[str, list[dict]]:
    return {label: result.loss_history for label, result in runs.items()}


def loss_chart(series: Mapping[str, Sequence[dict]], last_step: int | None = None) -> alt.Chart:
    """Training loss against the global step, overlaid per run; works for live points as well as results.

    `last_step` fixes the step axis to the whole run, so a live chart fills in from left to right.
    """
    labels = list(series)
    rows = [
        {"run": label, "step": point["step"], "epoch": point.get("epoch"), "loss": point["loss"]}
        for label, points in series.items()
        for point in points
    ]
    frame = pd.DataFrame(rows, columns=["run", "step", "epoch", "loss"])
    return (
        alt.Chart(frame, title="Training loss")
        .mark_line(point=True, opacity=0.85)
        .encode(
            x=alt.X(
                "step:Q",
                title="Step",
                axis=alt.Axis(format="d", tickMinStep=1),
                scale=alt.Scale(domain=[0, last_step]) if last_step else alt.Undefined,
            ),
            y=alt.Y("loss:Q", title="Loss", scale=alt.Scale(zero=False), axis=alt.Axis(format=".2f")),
            color=_color(labels),
            # Runs from the same starting weights often overlap: dashes keep both lines visible.
            strokeDash=alt.StrokeDash("run:N", sort=labels, legend=None),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("step:Q", title="Step"),
                alt.Tooltip("epoch:Q", title="Epoch"),
                alt.Tooltip("loss:Q", title="Loss", format=".4f"),
            ],
        )
    )


def throughput_chart(runs: Mapping[str, RunResult]) -> alt.Chart:
    """Steady-state images per second (warm-up steps left out), one bar per run that measured it."""
    labels = list(runs)
    rows = [
        {
            "run": label,
            "steady": result.steady_images_per_s,
            "overall": result.images_per_s,
            "warmup_steps": result.warmup_steps,
        }
        for label, result in runs.items()
        if result.steady_images_per_s is not None
    ]
    frame = pd.DataFrame(rows, columns=["run", "steady", "overall", "warmup_steps"])
    # An empty chart must say why it is empty rather than show a bare axis.
    title = "Throughput" if rows else "Throughput: not measured (every step was a warm-up step; train on more images)"
    return (
        alt.Chart(frame, title=title)
        .mark_bar()
        .encode(
            x=alt.X("run:N", title=None, sort=labels, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("steady:Q", title="Images per second (after warm-up)"),
            color=_color(labels),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("steady:Q", title="Images/s after warm-up", format=",.0f"),
                alt.Tooltip("overall:Q", title="Images/s over the whole run", format=",.0f"),
                alt.Tooltip("warmup_steps:Q", title="Warm-up steps left out"),
            ],
        )
    )


def comparison_table(baseline: RunResult, candidate: RunResult) -> pd.DataFrame:
    """The lab's table (Metric | FP32 | AMP | Improvement), computed from two runs, accuracy included."""
    comparison = compare(baseline, candidate)
    base_name, cand_name = _column_names(baseline, candidate)
    epochs = baseline.config.get("epochs")
    rows = [
        (
            f"Training time ({epochs} epoch{'s' if epochs != 1 else ''})"
            if epochs == candidate.config.get("epochs")
            else "Training time",
            format_seconds(baseline.total_time_s),
            format_seconds(candidate.total_time_s),
            speed_change(baseline.total_time_s, candidate.total_time_s),
        )
    ]
    if comparison.throughput_speedup is not None:
        rows.append(
            (
                "Throughput (images/s after warm-up)",
                f"{baseline.steady_images_per_s:,.0f}",
                f"{candidate.steady_images_per_s:,.0f}",
                f"{comparison.throughput_speedup:.2f}x",
            )
        )
    for key, reduction in comparison.memory_reduction_pct.items():
        rows.append(
            (
                f"Peak memory: {MEMORY_SHORT_NAMES.get(key, key)}",
                format_bytes(baseline.peak_memory[key]),
                format_bytes(candidate.peak_memory[key]),
                f"{reduction:.0f}% less" if reduction >= 0 else f"{-reduction:.0f}% more",
            )
        )
    if comparison.accuracy_delta is not None:
        rows.append(
            (
                "Test accuracy",
                f"{100 * baseline.test_accuracy:.1f}%",
                f"{100 * candidate.test_accuracy:.1f}%",
                f"{100 * comparison.accuracy_delta:+.1f} points",
            )
        )
    if baseline.config.get("precision") == "amp-fp16" or candidate.config.get("precision") == "amp-fp16":
        rows.append(("Steps skipped by the loss scaler", str(baseline.skipped_steps), str(candidate.skipped_steps), ""))
    return pd.DataFrame(rows, columns=["Metric", base_name, cand_name, "Improvement"])


def _column_names(baseline: RunResult, candidate: RunResult) -> tuple[str, str]:
    """The lab's headers (FP32, AMP) for the usual comparison; precision names for any other pair."""
    if baseline.precision == "fp32" and candidate.precision in ("amp-fp16", "amp-bf16"):
        return "FP32", "AMP"
    base_name, cand_name = precision_name(baseline.precision), precision_name(candidate.precision)
    if base_name == cand_name:
        return f"{base_name} (first)", f"{cand_name} (second)"
    return base_name, cand_name


def lab_reference_table() -> pd.DataFrame:
    """The lab's own example figures, in the same shape as comparison_table."""
    ref = LAB_REFERENCE
    fp32_mem, amp_mem = ref["fp32_peak_memory_bytes"], ref["amp_peak_memory_bytes"]
    rows = [
        (
            "Training time (5 epochs)",
            f"~{ref['fp32_time_s']:.0f} s",
            f"~{ref['amp_time_s']:.0f} s",
            f"~{100 * (ref['fp32_time_s'] - ref['amp_time_s']) / ref['fp32_time_s']:.0f}% faster",
        ),
        (
            "Peak GPU memory",
            f"~{fp32_mem / 1e9:.1f} GB",
            f"~{amp_mem / 1e9:.1f} GB",
            f"~{100 * (fp32_mem - amp_mem) / fp32_mem:.0f}% less",
        ),
    ]
    return pd.DataFrame(rows, columns=["Metric", "FP32 (lab)", "AMP (lab)", "Improvement"])
