"""Altair charts (and one HTML snippet) for the learn pages; no streamlit here, so each is testable alone."""

from __future__ import annotations

import html
import math

import altair as alt
import pandas as pd

from lessons.amp_step import STEP_PARTS
from lessons.number_formats import BitLayout, FormatRange
from lessons.payoff import COMPUTE_PART, WAIT_PART, WORKERS_PART
from lessons.roofline import layer_costs, roofline_modes
from lessons.underflow import FP16_MAX, FP16_SMALLEST_NORMAL, FP16_SMALLEST_SUBNORMAL, HistogramBin, ScaleOutcome
from ui.charts import precision_scale

BIT_COLOURS = {"sign": "#d62728", "exponent": "#2ca02c", "mantissa": "#1f77b4"}
FATE_COLOURS = {
    "becomes zero": "#d62728",
    "subnormal (fewer bits)": "#ff7f0e",
    "normal": "#2ca02c",
    "overflows to inf": "#7f0f7f",
}
# Powers of ten written out ("10", "1k", "1M"): a format string on a symlog axis printed "0k, 0k, 0k".
COUNT_LABELS = ("datum.value >= 1e6 ? format(datum.value / 1e6, '~g') + 'M' : datum.value >= 1e3 ? "
                "format(datum.value / 1e3, '~g') + 'k' : format(datum.value, '~g')")
PART_ORDER = [COMPUTE_PART, WAIT_PART, WORKERS_PART]
PART_COLOURS = {COMPUTE_PART: "#4c78a8", WAIT_PART: "#bab0ac", WORKERS_PART: "#f58518"}
DTYPE_COLOURS = {"float32": "#4c78a8", "float16": "#f58518", "bfloat16": "#e45756", "-": "#eeeeee"}


def bits_html(layout: BitLayout) -> str:
    """The bit string as coloured monospace spans: sign, exponent, mantissa."""
    spans = "".join(
        f'<span style="color:{BIT_COLOURS[part]}" title="{part}">{html.escape(getattr(layout, part))}</span>'
        for part in ("sign", "exponent", "mantissa")
    )
    return f'<code style="font-size:1.1em;letter-spacing:0.08em">{spans}</code>'


def bits_legend_html() -> str:
    return " ".join(
        f'<span style="color:{colour};font-weight:600">■ {part}</span>' for part, colour in BIT_COLOURS.items()
    )


def format_range_chart(table: list[FormatRange], value_summaries: list[dict] | None = None) -> alt.LayerChart:
    """Each format's subnormal and normal ranges on one log axis, its epsilon, and the model's own values."""
    segments, marks = [], []
    for row in table:
        segments.append({"row": row.format, "part": "subnormal range", "low": row.smallest_subnormal,
                         "high": row.smallest_normal})
        segments.append({"row": row.format, "part": "normal range", "low": row.smallest_normal, "high": row.largest})
        for label, value in (("smallest subnormal", row.smallest_subnormal), ("smallest normal", row.smallest_normal),
                             ("largest", row.largest), ("spacing near 1 (epsilon)", row.epsilon)):
            marks.append({"row": row.format, "landmark": label, "value": value})
    bands, medians = [], []
    for summary in value_summaries or []:
        if summary.get("median") is None:
            continue
        name = f"model {summary['kind']}"
        # min-max first, so the percentile band is drawn on top of it
        bands.append({"row": name, "part": "model values (min-max)", "low": summary["min"], "high": summary["max"]})
        bands.append({"row": name, "part": "model values (1st-99th percentile)", "low": summary["p01"],
                      "high": summary["p99"]})
        medians.append({"row": name, "landmark": "median |value|", "value": summary["median"]})
    order = [row.format for row in table] + [b["row"] for b in bands[::2]]
    x = alt.X("low:Q", title="|value| (log scale)", scale=alt.Scale(type="log"), axis=alt.Axis(format=".0e"))
    y = alt.Y("row:N", title=None, sort=order, axis=alt.Axis(labelLimit=220))
    part_colours = {
        "subnormal range": "#c6dbef",
        "normal range": "#4c78a8",
        "model values (min-max)": "#fdd0a2",
        "model values (1st-99th percentile)": "#f58518",
    }
    colour = alt.Color("part:N", title="range", legend=alt.Legend(labelLimit=300),
                       scale=alt.Scale(domain=list(part_colours), range=list(part_colours.values())))
    ranges = (
        alt.Chart(pd.DataFrame(segments + bands))
        .mark_bar(height=14)
        .encode(x=x, x2="high:Q", y=y, color=colour,
                tooltip=[alt.Tooltip("row:N", title="row"), "part:N",
                         alt.Tooltip("low:Q", format=".3e", title="from"),
                         alt.Tooltip("high:Q", format=".3e", title="to")])
    )
    landmarks = (
        alt.Chart(pd.DataFrame(marks + medians))
        .mark_tick(thickness=2, size=22, color="black")
        .encode(x=alt.X("value:Q", scale=alt.Scale(type="log")), y=y,
                tooltip=["row:N", "landmark:N", alt.Tooltip("value:Q", format=".4e")])
    )
    return alt.layer(ranges, landmarks).properties(title="Where each format can represent numbers", height=alt.Step(34))


def gradient_histogram_chart(bins: list[HistogramBin], scale_exponent: int = 0) -> alt.LayerChart:
    """Histogram of log2|g| after multiplying by 2^scale_exponent, coloured by what fp16 does to each bin."""
    rows = []
    for b in bins:
        low = b.log2_low + scale_exponent
        rows.append({"log2_low": low, "log2_high": low + 1, "count": b.count, "fraction": b.fraction,
                     "fate": _fate(low)})
    bars = (
        alt.Chart(pd.DataFrame(rows, columns=["log2_low", "log2_high", "count", "fraction", "fate"]))
        .mark_bar()
        .encode(
            x=alt.X("log2_low:Q", title=f"log2 |gradient × 2^{scale_exponent}|"),
            x2="log2_high:Q",
            # symlog keeps the few values that vanish visible next to bins of hundreds of thousands
            y=alt.Y("count:Q", title="number of values (symlog scale)", scale=alt.Scale(type="symlog"),
                    axis=alt.Axis(values=[0] + [10**k for k in range(1, 10)], labelExpr=COUNT_LABELS)),
            y2=alt.datum(0),
            color=alt.Color("fate:N", title="in fp16", scale=alt.Scale(domain=list(FATE_COLOURS),
                                                                          range=list(FATE_COLOURS.values()))),
            tooltip=[alt.Tooltip("log2_low:Q", title="from 2^"), alt.Tooltip("count:Q"),
                     alt.Tooltip("fraction:Q", format=".2%", title="share of nonzero values"), "fate:N"],
        )
    )
    thresholds = pd.DataFrame([
        {"log2": math.log2(FP16_SMALLEST_SUBNORMAL), "threshold": "fp16 smallest subnormal 2^-24"},
        {"log2": math.log2(FP16_SMALLEST_NORMAL), "threshold": "fp16 smallest normal 2^-14"},
        {"log2": math.log2(FP16_MAX), "threshold": "fp16 largest 65504"},
    ])
    rules = (
        alt.Chart(thresholds)
        .mark_rule(strokeDash=[4, 3], color="black")
        .encode(x="log2:Q", tooltip=["threshold:N", alt.Tooltip("log2:Q", format=".2f", title="log2")])
    )
    labels = rules.mark_text(angle=270, align="right", dy=-6, fontSize=11).encode(text="threshold:N", y=alt.value(4))
    return alt.layer(bars, rules, labels).properties(title="Gradient magnitudes against fp16's range", height=300)


def scale_sweep_chart(outcomes: list[ScaleOutcome], selected_exponent: int | None = None) -> alt.Chart:
    """Share of nonzero gradients that vanish, lose bits, or overflow at each power-of-two loss scale."""
    rows = []
    for o in outcomes:
        k = round(math.log2(o.scale))
        for fate, share in (("becomes zero", o.underflow_fraction),
                            ("subnormal (fewer bits)", o.subnormal_fraction),
                            ("overflows to inf", o.overflow_fraction)):
            rows.append({"exponent": k, "fate": fate, "share": share, "selected": k == selected_exponent})
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            x=alt.X("exponent:O", title="loss scale 2^k"),
            y=alt.Y("share:Q", title="share of nonzero gradients", axis=alt.Axis(format="%"), stack=True),
            color=alt.Color("fate:N", title="in fp16", scale=alt.Scale(domain=list(FATE_COLOURS),
                                                                          range=list(FATE_COLOURS.values()))),
            opacity=alt.condition(alt.datum.selected, alt.value(1.0), alt.value(0.45)),
            tooltip=[alt.Tooltip("exponent:O", title="k"), "fate:N", alt.Tooltip("share:Q", format=".4%")],
        )
        .properties(title="What each loss scale does to these gradients")
    )


def scale_trace_chart(
    points: list[dict], skipped_steps: list[int], title: str = "Loss scale over steps"
) -> alt.LayerChart:
    """The loss scale (log2 axis) per step, with steps the scaler skipped marked in red."""
    frame = pd.DataFrame(points, columns=["step", "scale"])
    frame["skipped"] = frame["step"].isin(set(skipped_steps))
    y = alt.Y("scale:Q", title="loss scale", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=_powers_of_two(frame["scale"]), format=",.0f"))
    line = (
        alt.Chart(frame)
        .mark_line(interpolate="step-after")
        .encode(x=alt.X("step:Q", title="step"), y=y,
                tooltip=["step:Q", alt.Tooltip("scale:Q", format=",.0f"), "skipped:N"])
    )
    skipped = (
        alt.Chart(frame[frame["skipped"]])
        .mark_point(color="#d62728", filled=True, size=60, shape="triangle-down")
        .encode(x="step:Q", y=y,
                tooltip=[alt.Tooltip("step:Q", title="skipped step"), alt.Tooltip("scale:Q", format=",.0f")])
    )
    return alt.layer(line, skipped).properties(title=title)


def dtype_grid_chart(rows: list[dict]) -> alt.Chart:
    """One coloured cell per layer and tensor (input, weight, output, gradients), one column of panels per mode."""
    columns = {"input_dtype": "input", "weight_dtype": "weight", "output_dtype": "output",
               "weight_grad_dtype": "weight grad", "output_grad_dtype": "output grad"}
    cells = [
        {"mode": row["mode"], "layer": f"{row['layer']} {row['kind']}", "tensor": label, "dtype": row[key]}
        for row in rows
        for key, label in columns.items()
    ]
    layer_order = list(dict.fromkeys(cell["layer"] for cell in cells))
    base = alt.Chart(pd.DataFrame(cells)).encode(
        x=alt.X("tensor:N", title=None, sort=list(columns.values()),
                axis=alt.Axis(labelAngle=-45, labelOverlap=False)),
        y=alt.Y("layer:N", title=None, sort=layer_order, axis=alt.Axis(labelLimit=120)),
    ).properties(width=alt.Step(26), height=alt.Step(22))
    grid = base.mark_rect(stroke="white").encode(
        color=alt.Color("dtype:N", scale=alt.Scale(domain=list(DTYPE_COLOURS), range=list(DTYPE_COLOURS.values())),
                        legend=alt.Legend(orient="bottom", direction="horizontal", title=None)),
        tooltip=["mode:N", "layer:N", "tensor:N", "dtype:N"],
    )
    # Two modes a row and the legend below them: at 800 px a row of five panels and a legend at its right were cut.
    modes = list(dict.fromkeys(c["mode"] for c in cells))
    return grid.facet(facet=alt.Facet("mode:N", title=None, sort=modes), columns=2)


def breakdown_chart(rows: list[dict]) -> alt.Chart:
    """One stacked bar per loader (BreakdownRow.to_dict()): training compute, waiting for data and, on a CPU, the
    DataLoader workers' CPU time taken from the same cores, in seconds of the training time."""
    parts = [
        {"loader": row["loader"], "part": part, "order": PART_ORDER.index(part), "seconds": seconds,
         "share": seconds / total if (total := row["data_wait_s"] + row["compute_s"]) > 0 else 0.0}
        for row in rows
        for part, seconds in row["parts"].items()
    ]
    shown = [part for part in PART_ORDER if any(p["part"] == part for p in parts)] or PART_ORDER[:2]
    frame = pd.DataFrame(parts, columns=["loader", "part", "order", "seconds", "share"])
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=alt.Y("loader:N", title=None),
            x=alt.X("seconds:Q", title="seconds of training", stack=True),
            color=alt.Color("part:N", title=None, sort=shown,
                            scale=alt.Scale(domain=shown, range=[PART_COLOURS[part] for part in shown]),
                            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
            order=alt.Order("order:Q"),
            tooltip=["loader:N", "part:N", alt.Tooltip("seconds:Q", format=".2f"),
                     alt.Tooltip("share:Q", title="share of the training time", format=".0%")],
        )
        .properties(title="Where the training time goes")
    )


def sweep_chart(rows: list[dict], field: str, title: str, axis_title: str, axis_format: str = ",.0f") -> alt.Chart:
    """A line per precision (and width) of `field` against batch size, batch on a log2 axis."""
    frame = pd.DataFrame([r for r in rows if r.get(field) is not None])
    if frame.empty:
        frame = pd.DataFrame(columns=["precision", "batch_size", "width", field])
    frame["series"] = frame["precision"] + " · width " + frame["width"].astype(str)
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
            y=alt.Y(f"{field}:Q", title=axis_title, axis=alt.Axis(format=axis_format)),
            color=alt.Color("precision:N", title="precision", scale=precision_scale(frame["precision"])),
            strokeDash=alt.StrokeDash("width:N", title="width"),
            detail="series:N",
            tooltip=["precision:N", "batch_size:Q", "width:N", alt.Tooltip(f"{field}:Q", format=axis_format)],
        )
        .properties(title=title)
    )


def sweep_speedup_chart(rows: list[dict]) -> alt.LayerChart:
    """AMP's images/s over fp32's at the same batch and width; the dashed line at 1x is break-even."""
    amp_rows = [r for r in rows if r.get("speedup") is not None]
    line = sweep_chart(amp_rows, "speedup", "AMP speedup over fp32", "speedup (×)", ".2f")
    even = alt.Chart(pd.DataFrame({"speedup": [1.0]})).mark_rule(strokeDash=[4, 3], color="black").encode(
        y="speedup:Q", tooltip=[alt.Tooltip("speedup:Q", title="break-even")]
    )
    return alt.layer(line, even)


def _powers_of_two(values: pd.Series) -> list[float]:
    """Axis ticks at every power of two the values span (loss scales are powers of two by default)."""
    positive = values[values > 0]
    if positive.empty:
        return []
    low, high = math.floor(math.log2(positive.min())), math.ceil(math.log2(positive.max()))
    step = max(1, (high - low) // 12)  # at most about a dozen ticks
    return [2.0**k for k in range(low, high + 1, step)]


def _fate(log2_low: int) -> str:
    """Which fp16 region a bin [2^low, 2^(low+1)) falls in, once scaled."""
    if log2_low + 1 <= math.log2(FP16_SMALLEST_SUBNORMAL) - 1:
        return "becomes zero"  # below half the smallest subnormal: rounds to zero
    if log2_low < math.log2(FP16_SMALLEST_NORMAL):
        return "subnormal (fewer bits)"
    if log2_low < 16:
        return "normal"
    return "overflows to inf"


MEMORY_COLOURS = {
    "weights (fp32)": "#4c78a8",
    "optimizer state (momentum, fp32)": "#9ecae9",
    "input batch": "#bab0ac",
    "16-bit weight copies (autocast)": "#f58518",
    "saved activations: float32": "#54a24b",
    "saved activations: bfloat16": "#e45756",
    "saved activations: float16": "#ff9d98",
    "saved activations: int64 (max-pool indices)": "#b279a2",
    "other live memory (logits, loss, library workspaces)": "#d8d8d8",
    "gradients (fp32)": "#72b7b2",
    "backward's extra at its peak": "#eeca3b",
    "allocator's cache (reserved, unused)": "#9d755d",
    "CUDA context and libraries": "#79706e",
}


def memory_breakdown_chart(rows: list[dict]) -> alt.Chart:
    """One stacked bar per precision: the step's memory by component (MB), in the order the rows give."""
    frame = pd.DataFrame(rows)
    frame["MB"] = frame["bytes"] / 1e6
    present = [c for c in MEMORY_COLOURS if c in set(frame["component"])]
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=alt.Y("precision:N", title=None, sort=list(dict.fromkeys(frame["precision"]))),
            x=alt.X("MB:Q", title="MB (10^6 bytes)", stack=True),
            color=alt.Color("component:N", title=None, sort=present,
                            scale=alt.Scale(domain=present, range=[MEMORY_COLOURS[c] for c in present]),
                            legend=alt.Legend(orient="bottom", columns=2, labelLimit=320)),
            order=alt.Order("order:Q"),
            tooltip=["precision:N", "component:N", alt.Tooltip("MB:Q", format=",.1f")],
        )
        .properties(title="One training step's memory, measured", height=alt.Step(40))
    )


def memory_by_batch_chart(rows: list[dict]) -> alt.Chart:
    """A step's peak memory (MB) against batch size, a line per precision, batch on a log2 axis."""
    frame = pd.DataFrame(rows)
    frame["MB"] = frame["bytes"] / 1e6
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("batch_size:Q", title="batch size", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("MB:Q", title="peak MB in one step"),
            color=alt.Color("precision:N", title="precision", scale=precision_scale(frame["precision"])),
            tooltip=["precision:N", "batch_size:Q", alt.Tooltip("MB:Q", format=",.1f"),
                     alt.Tooltip("saving:Q", title="AMP saves", format=".0%")],
        )
        .properties(title="A step's peak memory by batch size")
    )


def scale_traces_chart(runs: dict[str, tuple[list[dict], list[int]]], title: str) -> alt.LayerChart:
    """Several runs' loss scale (log2 axis) per step, a colour per run, each run's skipped steps marked."""
    frames = []
    for label, (points, skipped_steps) in runs.items():
        frame = pd.DataFrame(points, columns=["step", "scale"])
        frame["run"] = label
        frame["skipped"] = frame["step"].isin(set(skipped_steps))
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    y = alt.Y("scale:Q", title="loss scale after the step", scale=alt.Scale(type="log", base=2),
              axis=alt.Axis(values=_powers_of_two(frame["scale"]), format=",.0f"))
    colour = alt.Color("run:N", title=None, sort=list(runs), legend=alt.Legend(orient="bottom", labelLimit=400))
    line = alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=alt.X("step:Q", title="step"), y=y, color=colour,
        tooltip=["run:N", "step:Q", alt.Tooltip("scale:Q", format=",.0f"), "skipped:N"])
    skipped = alt.Chart(frame[frame["skipped"]]).mark_point(
        color="#d62728", filled=True, size=60, shape="triangle-down").encode(
        x="step:Q", y=y, tooltip=["run:N", alt.Tooltip("step:Q", title="skipped step"),
                                  alt.Tooltip("scale:Q", format=",.0f")])
    return alt.layer(line, skipped).properties(title=title)


def update_share_chart(series: dict[str, list[dict]], precisions: dict[str, str], field: str, title: str,
                       axis_title: str) -> alt.Chart:
    """A share from each run's update history (trainer/meters.py's UpdateTracker: "zero_grad_share" or
    "stalled_update_share") against the step, one line per run coloured by its mode. The axis starts at 0%, so
    that a gap between the runs is drawn to the scale of the whole."""
    rows = [{"run": label, "step": point["step"], "share": point[field], "precision": precisions.get(label, "")}
            for label, points in series.items() for point in points if point.get(field) is not None]
    frame = pd.DataFrame(rows, columns=["run", "step", "share", "precision"])
    labels = list(series)
    return (
        alt.Chart(frame, title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="Step", axis=alt.Axis(format="d", tickMinStep=1)),
            y=alt.Y("share:Q", title=axis_title, scale=alt.Scale(domainMin=0), axis=alt.Axis(format=".0%")),
            color=alt.Color("precision:N", title="Mode", scale=precision_scale(precisions.values()), legend=None),
            strokeDash=alt.StrokeDash("run:N", title="Run", sort=labels,
                                      legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
            tooltip=[alt.Tooltip("run:N", title="Run"), alt.Tooltip("step:Q", title="Step"),
                     alt.Tooltip("share:Q", title=axis_title, format=".2%")],
        )
    )


STEP_ROW = 5  # parts per row: the forward pass left to right, then the backward pass and the update right to left
STEP_BOX = (0.42, 0.3)  # half a box's width and height, in grid units
STEP_COLOURS = {True: "#f58518", False: "#eeeeee"}


def amp_step_positions() -> dict[str, tuple[float, float]]:
    """Each part's place on a two-row grid: the forward pass on the top row, left to right; the backward pass and
    the update on the bottom row, right to left, so the step reads as one loop."""
    places = {}
    for index, part in enumerate(STEP_PARTS):
        row, column = divmod(index, STEP_ROW)
        places[part.key] = (float(column if row == 0 else STEP_ROW - 1 - column), float(row))
    return places


def amp_step_chart(highlighted: tuple[str, ...] | set[str]) -> alt.LayerChart:
    """The picture of one AMP step (lessons/amp_step.py), the `highlighted` parts coloured: boxes joined by arrows
    in the order the parts run, and a dashed arrow from the scale's update back to the weights (the next step)."""
    places = amp_step_positions()
    half_w, half_h = STEP_BOX
    boxes = pd.DataFrame([
        {"key": part.key, "number": index + 1, "label": part.label, "what": part.what,
         "x": places[part.key][0] - half_w, "x2": places[part.key][0] + half_w, "cx": places[part.key][0],
         "y": places[part.key][1] - half_h, "y2": places[part.key][1] + half_h, "cy": places[part.key][1],
         "highlighted": part.key in highlighted}
        for index, part in enumerate(STEP_PARTS)
    ])
    arrows = []
    keys = [part.key for part in STEP_PARTS]
    for start, end in zip(keys, keys[1:] + keys[:1]):
        (x1, y1), (x2, y2) = places[start], places[end]
        if y1 == y2:  # along a row: from one box's side to the next one's
            step = half_w if x2 > x1 else -half_w
            arrows.append({"x": x1 + step, "y": y1, "x2": x2 - step, "y2": y2, "loop": False,
                           "shape": "triangle-right" if x2 > x1 else "triangle-left"})
        else:  # between the rows: down on the right (into backward), up on the left (the next step)
            step = half_h if y2 > y1 else -half_h
            arrows.append({"x": x1, "y": y1 + step, "x2": x2, "y2": y2 - step, "loop": end == keys[0],
                           "shape": "triangle-down" if y2 > y1 else "triangle-up"})
    lines = pd.DataFrame(arrows)
    x_scale = alt.Scale(domain=[-0.5, STEP_ROW - 0.5])
    y_scale = alt.Scale(domain=[-0.5, 1.5], reverse=True)
    x, y = alt.X("x:Q", scale=x_scale, axis=None), alt.Y("y:Q", scale=y_scale, axis=None)
    rects = alt.Chart(boxes).mark_rect(cornerRadius=6, stroke="#555555", strokeWidth=1).encode(
        x=x, x2="x2:Q", y=y, y2="y2:Q",
        color=alt.Color("highlighted:N", scale=alt.Scale(domain=[True, False], range=list(STEP_COLOURS.values())),
                        legend=None),
        tooltip=[alt.Tooltip("number:Q", title="Part"), alt.Tooltip("what:N", title="What happens")],
    )
    # One string broken at "\n" by Vega (a list of lines arrives in the browser as one "[a,b]" through Arrow).
    labels = alt.Chart(boxes).mark_text(fontSize=10, lineHeight=12, baseline="middle", lineBreak="\n").encode(
        x=alt.X("cx:Q", scale=x_scale, axis=None), y=alt.Y("cy:Q", scale=y_scale, axis=None), text="label",
    )
    rules = alt.Chart(lines).mark_rule(strokeWidth=1.5, color="#555555").encode(
        x=alt.X("x:Q", scale=x_scale, axis=None), y=alt.Y("y:Q", scale=y_scale, axis=None), x2="x2:Q", y2="y2:Q",
        strokeDash=alt.condition("datum.loop", alt.value([4, 3]), alt.value([1, 0])),
    )
    heads = alt.Chart(lines).mark_point(filled=True, size=45, color="#555555", opacity=1).encode(
        x=alt.X("x2:Q", scale=x_scale, axis=None), y=alt.Y("y2:Q", scale=y_scale, axis=None),
        shape=alt.Shape("shape:N", scale=None),
    )
    return (alt.layer(rules, heads, rects, labels).properties(height=170, title="One AMP training step")
            .configure_view(stroke=None))


ROOF_COLOURS = {"strict fp32": "#4c78a8", "fp32 as the lab ran it": "#72b7b2", "TF32": "#54a24b", "AMP": "#f58518"}


def roofline_chart(width: int, batch_size: int, tflops: dict[str, float], gb_per_s: float) -> alt.LayerChart:
    """The lab's matrix-product layers on this device's roofline, log-log: attainable TFLOP/s against FLOPs per byte,
    one roof per mode this device has rates for (the bandwidth's slope up to its convolutions' peak rate) and each
    layer at its intensity in each mode, under its own kind's rate (AMP's 16-bit activations move half the bytes, so
    its points sit further right, under a higher roof)."""
    intensities = [10 ** (exponent / 4) for exponent in range(-4, 17)]  # 0.1 to 10,000 FLOPs per byte
    roofs, points = [], []
    for mode in (mode for mode in roofline_modes() if {mode.conv, mode.linear} <= set(tflops)):
        peak = tflops[mode.conv]
        corner = peak * 1e3 / gb_per_s  # the ridge: where the bandwidth's slope meets the peak
        roofs += [{"mode": mode.name, "intensity": i, "tflops": min(peak, gb_per_s * i / 1e3)}
                  for i in sorted([*intensities, corner])]
        for layer in layer_costs(width, batch_size, sixteen_bit=mode.sixteen_bit):
            if layer.flops:
                rate = tflops[mode.rates[layer.kind]]
                points.append({"mode": mode.name, "layer": layer.name, "intensity": layer.intensity,
                               "tflops": min(rate, gb_per_s * layer.intensity / 1e3),
                               "bound": "arithmetic" if layer.intensity * gb_per_s / 1e3 >= rate else "bytes"})
    colour = alt.Color("mode:N", title="Mode", scale=alt.Scale(domain=list(ROOF_COLOURS),
                                                               range=list(ROOF_COLOURS.values())))
    x = alt.X("intensity:Q", title="FLOPs per byte moved (log)", scale=alt.Scale(type="log"))
    y = alt.Y("tflops:Q", title="Attainable TFLOP/s (log)", scale=alt.Scale(type="log"))
    roof = alt.Chart(pd.DataFrame(roofs)).mark_line(strokeWidth=2).encode(x=x, y=y, color=colour)
    layers = alt.Chart(pd.DataFrame(points)).mark_point(filled=True, size=70).encode(
        x=x, y=y, color=colour, shape=alt.Shape("layer:N", title="Layer"),
        tooltip=[alt.Tooltip("layer:N", title="Layer"), alt.Tooltip("mode:N", title="Mode"),
                 alt.Tooltip("intensity:Q", title="FLOPs per byte", format=",.1f"),
                 alt.Tooltip("tflops:Q", title="Attainable TFLOP/s", format=",.3g"),
                 alt.Tooltip("bound:N", title="Bound by")],
    )
    return alt.layer(roof, layers).properties(title="The lab's layers on this device's roofline", height=300)


def ladder_chart(report: dict) -> alt.LayerChart:
    """Training time per rung of a ladder (bench/ladder.py: the median over its repeats, compiling left out), with
    each rung's accuracy in its tooltip; for a ladder of the lab's whole workload, the lab's own time and airbench's
    published times as labelled reference lines (other people's figures, on their GPUs)."""
    rows = []
    for rung in report["rungs"]:
        if rung.get("seconds"):
            ordered = sorted(rung["seconds"])
            speed = rung.get("speedup_vs_lab") or {}
            rows.append({"rung": rung["name"], "seconds": ordered[(len(ordered) - 1) // 2],
                         "accuracy": rung.get("test_accuracy"), "speedup": speed.get("median"),
                         "compile_s": rung.get("compile_s")})
    names = [row["rung"] for row in rows]
    bars = alt.Chart(pd.DataFrame(rows)).mark_bar(color="#4c78a8").encode(
        x=alt.X("seconds:Q", title="Training time (s, median over repeats)"),
        y=alt.Y("rung:N", sort=names, title=None, axis=alt.Axis(labelLimit=260)),
        tooltip=[alt.Tooltip("rung:N", title="Rung"), alt.Tooltip("seconds:Q", format=",.2f", title="Seconds"),
                 alt.Tooltip("speedup:Q", format=".2f", title="x the lab's loop"),
                 alt.Tooltip("accuracy:Q", format=".1%", title="Test accuracy"),
                 alt.Tooltip("compile_s:Q", format=",.1f", title="Compiling (s, apart)")],
    )
    layers = [bars]
    if not report.get("quick"):
        marks = pd.DataFrame([{"who": name, "seconds": seconds} for name, seconds in report["references"].items()])
        layers.append(alt.Chart(marks).mark_rule(strokeDash=[4, 3], color="#888888").encode(
            x="seconds:Q", tooltip=[alt.Tooltip("who:N", title="Other people's figure"), "seconds:Q"]))
    return alt.layer(*layers).properties(title="The ladder to the fastest lab run", height=40 + 34 * len(rows))
