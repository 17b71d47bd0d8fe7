"""Altair charts and the lab's results table, built from RunResults.

No Streamlit here: every builder returns a plain Altair chart or DataFrame, so tests can check them alone.
Runs come in as an ordered mapping {label: RunResult}; the first one is the baseline.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence

import altair as alt
import pandas as pd

from server.records import JobSpec, JobView
from trainer import comparison_table as table
from trainer.comparison_table import (
    MEMORY_SHORT_NAMES,
    precision_name,
    speed_change,
)
from trainer.profile import CATEGORIES as PROFILE_CATEGORIES
from trainer.results import MEMORY_LABELS, RunResult, SpeedupInterval, split_pairs


def numbered(names: Sequence[str]) -> list[str]:
    """The names with a recurring one numbered from its second time on ("FP32", "FP32 #2"), so none is there twice."""
    labels: list[str] = []
    for name in names:
        label, number = name, 2
        while label in labels:
            label = f"{name} #{number}"
            number += 1
        labels.append(label)
    return labels


def run_labels(results: Sequence[RunResult]) -> dict[str, RunResult]:
    """Label runs by precision, numbering repeats, so that two fp32 runs stay apart in a chart."""
    return dict(zip(numbered([precision_name(result.precision) for result in results]), results))


def run_names(spec: JobSpec) -> list[str]:
    """A name for each run of a job, none twice: with repeated pairs, which pair ("FP32, pair 2 of 3"); else the
    precision, numbered where it recurs ("FP32 #2"), as Results labels runs."""
    names = [precision_name(config.precision) for config in spec.runs]
    pairs = len(names) // 2
    if spec.kind == "compare" and pairs > 1:
        return [f"{name}, pair {index // 2 + 1} of {pairs}" for index, name in enumerate(names)]
    return numbered(names)


def named_results(job: JobView) -> dict[str, RunResult]:
    """A job's finished runs under the names the Run page showed while they trained ("FP32, pair 2 of 3")."""
    names = run_names(job.spec)
    return {names[index]: outcome.result for index, outcome in enumerate(job.outcomes)
            if outcome.status == "ok" and outcome.result is not None and index < len(names)}


def run_modes(spec: JobSpec) -> dict[str, str]:
    """{run name: precision mode} for a job's runs, which the charts colour by."""
    return dict(zip(run_names(spec), (config.precision for config in spec.runs)))


# The project's colour per precision mode (trainer.config.TRAINING_PRECISIONS), the same on every chart that colours
# by mode: fp32-default, fp32 as PyTorch defaults, a lighter blue beside strict fp32's; the deliberate failures in
# colours no learner's mode has.
PRECISION_COLOURS = {"fp32": "#4c78a8", "fp32-default": "#9ecae9", "tf32": "#72b7b2", "amp-fp16": "#f58518",
                     "amp-bf16": "#e45756", "amp-fp16-unscaled": "#b279a2", "fp16-true": "#9d755d"}
OTHER_COLOUR = "#bab0ac"  # a mode outside that map (none of the training modes)


def precision_scale(precisions: Iterable[str]) -> alt.Scale:
    """The project's colour per precision, for the precisions present only (so the legend lists no others)."""
    present = set(precisions)
    shown = [p for p in PRECISION_COLOURS if p in present] or list(PRECISION_COLOURS)
    return alt.Scale(domain=shown, range=[PRECISION_COLOURS[p] for p in shown])


# Bar charts lie on their side: each name is a row of its own on the y axis, so no two names can collide however
# narrow the chart (a half-width chart at 800 px is about 230 px wide; side by side on an x axis, Streamlit's theme
# hid every other name). Run names are short and stay on one line; long names (memory figures) are wrapped into
# lines of at most WRAP_CHARS characters, split on LINE_BREAK by the axis.
LINE_BREAK = "|"
WRAPPED_LABELS = f"split(datum.label, '{LINE_BREAK}')"
# A run's name breaks into lines at its comma on an axis and in a legend ("AMP (bf16)" over "pair 2 of 3"): whole,
# a repeated pair's name took a half-width chart's room from its bars and ran out of the chart in its legend.
RUN_NAME_BREAK = ", "
RUN_LABELS = f"split(datum.label, '{RUN_NAME_BREAK}')"
WRAP_CHARS = 16
LABEL_LIMIT_PX = 120
LABEL_COLOUR = "#262730"  # Streamlit's text colour: a bar's label stays readable whatever the bar's colour
# Room to the right of the longest bar for the text written after it ("1.41x faster"), as a share of its length.
TEXT_ROOM = 2.0


def _run_legend() -> alt.Legend:
    """The runs one per line below the chart (a legend in a row above it was cut off after three runs at 800 px),
    a repeated pair's name on two lines."""
    return alt.Legend(orient="bottom", columns=1, labelExpr=RUN_LABELS)


def _color(precisions: Mapping[str, str] | Sequence[str], legend: bool = True) -> alt.Color:
    """Colour per run, with its legend (charts that name each run on an axis need none). Given each run's precision
    ({run: precision}), a run takes its precision's colour, so fp32 is the same blue on every chart of the app and
    the repeated runs of one mode share it (their names, dashes and markers tell them apart); given run names
    only (a live chart of unknown modes), Vega's colours in order."""
    labels = list(precisions)
    if isinstance(precisions, Mapping):
        scale = alt.Scale(domain=labels, range=[PRECISION_COLOURS.get(p, OTHER_COLOUR) for p in precisions.values()])
    else:
        scale = alt.Scale(domain=labels)
    return alt.Color("run:N", title="Run", scale=scale, sort=labels, legend=_run_legend() if legend else None)


def run_precisions(runs: Mapping[str, RunResult]) -> dict[str, str]:
    """{run: its precision mode}, which _color colours by."""
    return {label: result.precision for label, result in runs.items()}


LINE_PX = 14  # one line of an axis label or a legend entry at Streamlit's chart font size, with its spacing
BAR_PX = 16  # the least height one bar gets
ROW_PX = 30  # the least height one row gets
LEGEND_PX, LEGEND_ENTRY_PX = 40, 18  # a legend below the chart: its heading and spacing, and each entry
PLOT_PX = 300  # a line chart's plot with its title and axes
# Streamlit fits the whole chart into its height (Vega's autosize "fit"): the title, the x axis with its title and
# the legend's heading take this much of it before any row.
FRAME_PX = 110


def _lines(name: str, separator: str) -> int:
    return len(str(name).split(separator))


def _rows_height(names: Sequence[str], bars_per_row: int = 1, legend: Sequence[str] = (),
                 separator: str = RUN_NAME_BREAK) -> int:
    """Height of a horizontal bar chart with a row per name: each row tall enough for its name (split into lines
    at `separator`, as its axis splits it) and its bars, plus the chart's frame and a legend of `legend` below it
    (Vega-Lite's 20 px a row, with the frame inside the height Streamlit gives it, squeezed the rows until the
    names lay on top of each other)."""
    lines = max((_lines(name, separator) for name in names), default=1)
    rows = max(1, len(names)) * max(ROW_PX, lines * LINE_PX + 10, bars_per_row * BAR_PX)
    return FRAME_PX + rows + _legend_height(legend)


def _legend_height(entries: Sequence[str]) -> int:
    """Height a legend of runs below the chart takes out of the chart's own (nothing without entries): an entry
    per run, a repeated pair's name on two lines."""
    if not entries:
        return 0
    return LEGEND_PX + sum(max(LEGEND_ENTRY_PX, _lines(entry, RUN_NAME_BREAK) * LINE_PX + 4) for entry in entries)


def _with_legend_height(labels: Sequence[str]) -> int:
    """Height of a line chart with a legend of `labels` below it: the plot keeps PLOT_PX whatever the legend's
    length (Streamlit fits the legend inside the chart's height, so six runs' legend squeezed the plot)."""
    return PLOT_PX + _legend_height(labels)


def _name_axis(field: str, names: Sequence[str], wrap: bool = False) -> alt.Y:
    """The names of a horizontal bar chart, one per row, in the order given: pre-wrapped ones (`wrap`) split into
    lines at LINE_BREAK, run names at their comma."""
    axis = alt.Axis(labelLimit=LABEL_LIMIT_PX, labelExpr=WRAPPED_LABELS if wrap else RUN_LABELS)
    return alt.Y(field, title=None, sort=list(names), axis=axis)


def wrapped(name: str) -> str:
    """`name` broken into lines of at most WRAP_CHARS characters at spaces, for an axis that splits them."""
    return LINE_BREAK.join(textwrap.wrap(name, WRAP_CHARS, break_on_hyphens=False)) or name


def time_chart(runs: Mapping[str, RunResult]) -> alt.LayerChart:
    """Total training time per run as bars, each compared mode's labelled with its change against its own pair's
    baseline (with repeated pairs, the fp32 run just before it, not the first fp32 run: pair against pair, as the
    speedup's median and range are computed)."""
    labels = list(runs)
    baselines, candidates = split_pairs(list(runs.values()))
    against = {id(candidate): baseline for baseline, candidate in zip(baselines, candidates)}
    rows = [
        {
            "run": label,
            "seconds": result.total_time_s,
            "epochs": result.config.epochs,
            "change": (speed_change(against[id(result)].total_time_s, result.total_time_s)
                       if id(result) in against else "baseline"),
        }
        for label, result in runs.items()
    ]
    for row in rows:  # on the bar, only "1.56x faster": the whole sentence is in the tooltip
        row["short"] = row["change"].split(" (")[0]
    frame = pd.DataFrame(rows, columns=["run", "seconds", "epochs", "change", "short"])
    longest = max((row["seconds"] for row in rows), default=0.0) or 1.0
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=_name_axis("run:N", labels),
            x=alt.X("seconds:Q", title="Total training time (s)", scale=alt.Scale(domain=[0, longest * TEXT_ROOM])),
            color=_color(run_precisions(runs), legend=False),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("seconds:Q", title="Training time (s)", format=".2f"),
                alt.Tooltip("epochs:Q", title="Epochs"),
                alt.Tooltip("change:N", title="Against its pair's baseline"),
            ],
        )
    )
    text = bars.mark_text(align="left", dx=4).encode(text="short:N", color=alt.value(LABEL_COLOUR))
    return alt.layer(bars, text).properties(title="Total training time", height=_rows_height(labels))


def memory_chart(runs: Mapping[str, RunResult]) -> alt.Chart:
    """Peak memory per figure (grouped bars, one per run), in MB."""
    labels = list(runs)
    rows = []
    for label, result in runs.items():
        for key, count in result.peak_memory.items():
            rows.append(
                {
                    "run": label,
                    "figure": wrapped(MEMORY_SHORT_NAMES.get(key, key)),
                    "description": MEMORY_LABELS.get(key, key),
                    "megabytes": count / 1e6,
                }
            )
    frame = pd.DataFrame(rows, columns=["run", "figure", "description", "megabytes"])
    figures = list(dict.fromkeys(row["figure"] for row in rows))
    height = _rows_height(figures, bars_per_row=len(labels), legend=labels, separator=LINE_BREAK)
    return (
        alt.Chart(frame, title="Peak memory", height=height)
        .mark_bar()
        .encode(
            y=_name_axis("figure:N", figures, wrap=True),
            yOffset=alt.YOffset("run:N", sort=labels),
            x=alt.X("megabytes:Q", title="Peak memory (MB)"),
            color=_color(run_precisions(runs)),
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
        alt.Chart(frame, title="Time per epoch", height=_with_legend_height(labels))
        .mark_line(point=True)
        .encode(
            x=alt.X("epoch:O", title="Epoch", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("seconds:Q", title="Time per epoch (s)"),
            color=_color(run_precisions(runs)),
            strokeDash=alt.StrokeDash("run:N", title="Run", sort=labels, legend=_run_legend()),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("epoch:O", title="Epoch"),
                alt.Tooltip("seconds:Q", title="Time (s)", format=".2f"),
            ],
        )
    )


def loss_series(runs: Mapping[str, RunResult]) -> dict[str, list[dict]]:
    return {label: result.loss_history for label, result in runs.items()}


# The loss axis spans at least this share of the loss: two runs 2e-5 apart are drawn as one line, not as a cliff.
MIN_LOSS_AXIS_SHARE = 0.05


def loss_scale(losses: Sequence[float]) -> alt.Scale:
    """The loss axis: fitted to the values (not from zero), but never narrower than MIN_LOSS_AXIS_SHARE of them."""
    if not losses:
        return alt.Scale(zero=False)
    low, high = min(losses), max(losses)
    least = MIN_LOSS_AXIS_SHARE * max(abs(high), abs(low))
    if high - low >= least or least == 0:
        return alt.Scale(zero=False)
    middle = (low + high) / 2
    return alt.Scale(domain=[middle - least / 2, middle + least / 2])


def loss_chart(
    series: Mapping[str, Sequence[dict]], last_step: int | None = None, precisions: Mapping[str, str] | None = None
) -> alt.Chart:
    """Training loss against the global step, overlaid per run; works for live points as well as results.

    `last_step` fixes the step axis to the whole run, so a live chart fills in from left to right; `precisions`
    ({run: precision}) colours each run by its mode.
    """
    labels = list(series)
    rows = [
        {"run": label, "step": point["step"], "epoch": point.get("epoch"), "loss": point["loss"]}
        for label, points in series.items()
        for point in points
    ]
    frame = pd.DataFrame(rows, columns=["run", "step", "epoch", "loss"])
    # Runs from the same starting weights often overlap: each has its own dash and marker, one legend shows both,
    # and clicking a run in the legend brings it to the front (the others fade).
    picked = alt.selection_point(fields=["run"], bind="legend")
    return (
        alt.Chart(frame, title="Training loss", height=_with_legend_height(labels))
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "step:Q",
                title="Step",
                axis=alt.Axis(format="d", tickMinStep=1),
                scale=alt.Scale(domain=[0, last_step]) if last_step else alt.Undefined,
            ),
            # "~g" keeps as many digits as the ticks need: a narrow live range no longer repeats "2.30, 2.30".
            y=alt.Y("loss:Q", title="Loss", scale=loss_scale(frame["loss"].tolist()), axis=alt.Axis(format="~g")),
            color=_color({label: precisions.get(label, "") for label in labels} if precisions else labels),
            strokeDash=alt.StrokeDash("run:N", title="Run", sort=labels, legend=_run_legend()),
            shape=alt.Shape("run:N", title="Run", sort=labels, legend=_run_legend()),
            opacity=alt.condition(picked, alt.value(0.9), alt.value(0.15)),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("step:Q", title="Step"),
                alt.Tooltip("epoch:Q", title="Epoch"),
                alt.Tooltip("loss:Q", title="Loss", format=".4f"),
            ],
        )
        .add_params(picked)
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
    # An empty chart says why it is empty, in lines short enough for a half-width chart (one line was cut off at
    # 1280 px), and draws no bare axis.
    title = "Throughput" if rows else ["Throughput: not measured", "(every step was a warm-up step:",
                                       "train on more images)"]
    return (
        alt.Chart(frame, title=title, height=_rows_height([row["run"] for row in rows]))
        .mark_bar()
        .encode(
            y=_name_axis("run:N", labels),
            x=alt.X("steady:Q", title="Images per second (after warm-up)", axis=alt.Undefined if rows else None),
            color=_color(run_precisions(runs), legend=False),
            tooltip=[
                alt.Tooltip("run:N", title="Run"),
                alt.Tooltip("steady:Q", title="Images/s after warm-up", format=",.0f"),
                alt.Tooltip("overall:Q", title="Images/s over the whole run", format=",.0f"),
                alt.Tooltip("warmup_steps:Q", title="Warm-up steps left out"),
            ],
        )
    )


def comparison_table(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None
) -> pd.DataFrame:
    """The lab's table (Metric | FP32 | AMP | Improvement), computed from two runs, accuracy included; with the
    speedup's interval when the runs were repeated."""
    return _frame(table.comparison_table(baseline, candidate, interval))


def lab_reference_table() -> pd.DataFrame:
    """The lab's own example figures, in the same shape as comparison_table."""
    return _frame(table.lab_reference_table())


def _frame(built: table.ComparisonTable) -> pd.DataFrame:
    return pd.DataFrame(built.rows, columns=list(built.columns))


def class_speedup_chart(frame: pd.DataFrame) -> alt.Chart:
    """One bar per learner: their latest comparison's speedup, with 1x (no gain) marked."""
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("speedup (x):Q", title="Speedup over the baseline (x)"),
        y=alt.Y("learner:N", sort="-x", title=None),
        color=alt.Color("compared:N", title="Mode", scale=precision_scale(frame["compared"])),
        tooltip=["learner", "device", "baseline", "compared", "speedup (x)", "lowest speedup (x)",
                 "highest speedup (x)", "pairs", "memory saved (%)", "finished (UTC)"],
    )
    no_gain = alt.Chart(pd.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 4]).encode(x="x:Q")
    return (bars + no_gain).properties(title="The class's speedups (dashed: 1x, no gain)")


def profile_chart(runs: Mapping[str, RunResult]) -> alt.Chart:
    """Each profiled run's step by kind of work (trainer/profile.py), one stacked bar a run, in milliseconds."""
    rows = [{"run": label, "category": name, "ms": seconds * 1e3, "order": PROFILE_CATEGORIES.index(name)}
            for label, result in runs.items() if result.profile
            for name, seconds in result.profile["categories"].items() if seconds > 0]
    names = [label for label, result in runs.items() if result.profile]
    return (
        alt.Chart(pd.DataFrame(rows), title="One step by kind of work (profiled window)",
                  height=_rows_height(names, legend=list(PROFILE_CATEGORIES)))
        .mark_bar()
        .encode(
            x=alt.X("sum(ms):Q", title="Milliseconds per step", stack="zero"),
            y=_name_axis("run", names),
            color=alt.Color("category:N", title="Work", sort=list(PROFILE_CATEGORIES),
                            legend=alt.Legend(orient="bottom", columns=2, labelLimit=0)),
            order=alt.Order("order:Q"),
            tooltip=[alt.Tooltip("run:N", title="Run"), alt.Tooltip("category:N", title="Work"),
                     alt.Tooltip("ms:Q", title="ms per step", format=",.2f")],
        )
    )
