import numpy as np
import pytest

from lessons.autocast_trace import trace_dtypes
from lessons.number_formats import encode, format_table
from lessons.payoff import BreakdownRow, SweepRow, breakdown_sentence
from lessons.scaler_sim import ScalerSettings, simulate_gradients
from lessons.underflow import log2_histogram, scale_sweep
from ui import learn_charts
from ui.charts import PRECISION_COLOURS


def layer_data(chart) -> list:
    """The data of every layer of a (possibly layered) chart, as records."""
    spec = chart.to_dict()
    datasets = spec.get("datasets", {})
    return [datasets[name] for name in datasets]


def test_bits_html_colours_each_part():
    snippet = learn_charts.bits_html(encode(-2.5, "fp16"))
    assert snippet.count("<span") == 3
    assert f'color:{learn_charts.BIT_COLOURS["sign"]}" title="sign">1</span>' in snippet
    assert ">10000<" in snippet and ">0100000000<" in snippet


def test_format_range_chart_has_formats_landmarks_and_model_values():
    summaries = [{"kind": "gradients", "count": 10, "zeros": 0, "min": 1e-9, "p01": 1e-8, "median": 1e-5,
                  "p99": 1e-3, "max": 1e-2},
                 {"kind": "activations", "count": 4, "zeros": 4, "min": None, "p01": None, "median": None,
                  "p99": None, "max": None}]
    chart = learn_charts.format_range_chart(format_table(), summaries)
    spec = chart.to_dict()
    assert spec["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"
    rows = [row for data in layer_data(chart) for row in data]
    names = {row["row"] for row in rows}
    assert {"fp32", "fp16", "bf16", "model gradients"} <= names
    assert "model activations" not in names  # nothing nonzero to show
    fp16_largest = [r for r in rows if r["row"] == "fp16" and r.get("landmark") == "largest"]
    assert fp16_largest[0]["value"] == 65504.0


def test_gradient_histogram_moves_with_the_scale_and_marks_thresholds():
    values = np.array([2.0**-30, 2.0**-20, 2.0**-10, 1.0])
    bins = log2_histogram(values)
    unscaled = learn_charts.gradient_histogram_chart(bins, 0)
    scaled = learn_charts.gradient_histogram_chart(bins, 10)

    def fates(chart):
        return {r["log2_low"]: r["fate"] for data in layer_data(chart) for r in data if "fate" in r}

    assert fates(unscaled)[-30] == "becomes zero" and fates(unscaled)[-20] == "subnormal (fewer bits)"
    assert fates(scaled)[-20] == "subnormal (fewer bits)" and fates(scaled)[-10] == "normal"
    assert fates(learn_charts.gradient_histogram_chart(bins, 16))[16] == "overflows to inf"
    thresholds = [r["threshold"] for data in layer_data(unscaled) for r in data if "threshold" in r]
    assert len(thresholds) == 3


def test_scale_sweep_chart_rows():
    outcomes = scale_sweep(np.array([2.0**-30, 1000.0]), max_exponent=8)
    chart = learn_charts.scale_sweep_chart(outcomes, selected_exponent=3)
    rows = layer_data(chart)[0]
    assert len(rows) == 9 * 3
    assert [r for r in rows if r["selected"]][0]["exponent"] == 3
    assert chart.to_dict()["encoding"]["tooltip"]


def test_scale_trace_chart_marks_skipped_steps():
    trace = simulate_gradients([4.0] * 6, ScalerSettings(growth_interval=100))
    points = [{"step": s.step, "scale": s.scale_after} for s in trace.steps]
    chart = learn_charts.scale_trace_chart(points, trace.skipped_steps)
    datasets = layer_data(chart)
    marked = min(datasets, key=len)
    assert [r["step"] for r in marked] == [1, 2, 3]


def test_dtype_grid_chart_from_traces():
    rows = [{"mode": "amp-bf16", **r} for r in trace_dtypes("amp-bf16", "cpu", batch_size=2).to_rows()]
    chart = learn_charts.dtype_grid_chart(rows)
    cells = layer_data(chart)[0]
    assert len(cells) == 9 * 5
    assert {c["dtype"] for c in cells} == {"float32", "bfloat16", "-"}


def test_breakdown_and_sweep_charts():
    breakdown = learn_charts.breakdown_chart([BreakdownRow("dataloader", "fp32", 64, 3.0, 1.0, 100.0).to_dict()])
    assert len(layer_data(breakdown)[0]) == 2
    rows = [
        SweepRow("fp32", 64, 1, "ok", 1000.0, 10_000, "process_rss_growth").to_dict(),
        SweepRow("amp-bf16", 64, 1, "ok", 1500.0, 8_000, "process_rss_growth", speedup=1.5).to_dict(),
        SweepRow("fp32", 128, 1, "out of memory", None, None, None).to_dict(),
    ]
    throughput = learn_charts.sweep_chart(rows, "images_per_s", "Throughput", "images/s")
    assert len(layer_data(throughput)[0]) == 2  # the run without a figure is left out
    speedup = learn_charts.sweep_speedup_chart(rows)
    assert [r["speedup"] for r in layer_data(speedup)[0] if "precision" in r] == [1.5]
    empty = learn_charts.sweep_chart([], "images_per_s", "Throughput", "images/s")
    assert empty.to_dict()["mark"]["type"] == "line"
    scale = throughput.to_dict()["encoding"]["color"]["scale"]  # the project's colour per mode, as every chart's
    assert scale == {"domain": ["fp32", "amp-bf16"], "range": [PRECISION_COLOURS["fp32"], PRECISION_COLOURS["amp-bf16"]]}


def test_the_breakdown_chart_shows_the_workers_cpu_as_its_own_part_as_the_sentence_counts_it():
    # The CPU case: 2% waiting, yet the workers took 40 s of CPU from the 2 cores during 38 s of training.
    rows = [BreakdownRow("dataloader", "fp32", 256, data_wait_s=0.7, compute_s=37.3, images_per_s=1000.0,
                         worker_cpu_s=40.0, cores=2),
            BreakdownRow("resident", "fp32", 256, data_wait_s=0.1, compute_s=20.9, images_per_s=1810.0)]
    chart = learn_charts.breakdown_chart([row.to_dict() for row in rows])
    data = {(d["loader"], d["part"]): d for d in layer_data(chart)[0]}
    assert set(data) == {("dataloader", "training compute"), ("dataloader", "waiting for data"),
                         ("dataloader", "workers' CPU on the same cores"), ("resident", "training compute"),
                         ("resident", "waiting for data")}
    workers = data[("dataloader", "workers' CPU on the same cores")]
    assert workers["seconds"] == pytest.approx(20.0) and workers["share"] == pytest.approx(rows[0].worker_share)
    assert data[("dataloader", "training compute")]["seconds"] == pytest.approx(37.3 - 20.0)
    assert sum(d["seconds"] for (loader, _), d in data.items() if loader == "dataloader") == pytest.approx(38.0)
    sentence = breakdown_sentence(rows)
    assert f"{workers['share']:.0%} of the 2 cores' time" in sentence
    assert f"{data[('dataloader', 'waiting for data')]['share']:.0%} of the training time went to waiting" in sentence
    colour = chart.to_dict()["encoding"]["color"]["scale"]
    assert colour["domain"] == ["training compute", "waiting for data", "workers' CPU on the same cores"]
    # A GPU run (or one without the workers' figure) has no such part, and the legend does not offer one.
    gpu = learn_charts.breakdown_chart([rows[1].to_dict()]).to_dict()["encoding"]["color"]["scale"]
    assert gpu["domain"] == ["training compute", "waiting for data"]


@pytest.mark.parametrize("builder", ["scale_sweep_chart", "breakdown_chart"])
def test_charts_have_titles(builder):
    chart = (learn_charts.scale_sweep_chart(scale_sweep(np.ones(2), 2)) if builder == "scale_sweep_chart"
             else learn_charts.breakdown_chart([]))
    assert chart.to_dict()["title"]


def test_histogram_counts_are_labelled_in_words_not_a_format_that_printed_0k():
    bins = log2_histogram(np.array([2.0**-30, 2.0**-20, 1.0]))
    bars = learn_charts.gradient_histogram_chart(bins, 0).to_dict()["layer"][0]
    axis = bars["encoding"]["y"]["axis"]
    assert axis["labelExpr"] == learn_charts.COUNT_LABELS and "format" not in axis


def test_memory_breakdown_chart_stacks_components_in_order():
    rows = [{"precision": "fp32", "batch_size": 8, "component": "weights (fp32)", "order": 0, "bytes": 8e6},
            {"precision": "fp32", "batch_size": 8, "component": "gradients (fp32)", "order": 9, "bytes": 8e6}]
    spec = learn_charts.memory_breakdown_chart(rows).to_dict()
    assert spec["encoding"]["x"]["stack"] is True and spec["encoding"]["order"]["field"] == "order"
    assert spec["encoding"]["color"]["scale"]["domain"] == ["weights (fp32)", "gradients (fp32)"]



def test_the_amp_step_is_one_loop_of_ten_parts_with_a_pages_parts_highlighted():
    from lessons.amp_step import PAGE_PARTS, PART_KEYS, STEP_PARTS, highlight_sentence, parts_for
    from ui.learn_charts import amp_step_chart, amp_step_positions

    spec = amp_step_chart(PAGE_PARTS["loss_scaling"]).to_dict()
    boxes = next(rows for rows in spec["datasets"].values() if rows and "highlighted" in rows[0])
    assert [row["key"] for row in boxes if row["highlighted"]] == ["scale", "unscale", "step", "update"]
    arrows = next(rows for rows in spec["datasets"].values() if rows and "loop" in rows[0])
    assert len(arrows) == len(STEP_PARTS) and [a["loop"] for a in arrows].count(True) == 1  # back to the weights
    places = amp_step_positions()
    assert places["master"] == (0.0, 0.0) and places["scale"] == (4.0, 0.0)  # forward: the top row
    assert places["backward"] == (4.0, 1.0) and places["update"] == (0.0, 1.0)  # backward: under it, leftwards
    assert len(set(places.values())) == len(PART_KEYS)
    assert highlight_sentence("when_amp_pays").endswith("highlighted parts: 16-bit conv and linear.")
    assert len(parts_for("overview")) == len(STEP_PARTS)
    with pytest.raises(ValueError, match="no AMP-step parts for the page 'history'"):
        parts_for("history")


def test_the_roofline_puts_each_matrix_layer_under_its_modes_roof():
    from ui.learn_charts import roofline_chart

    peaks = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.5, "fp16": 989.5}
    spec = roofline_chart(1, 256, peaks, 4800.0).to_dict()
    roofs = next(rows for rows in spec["datasets"].values() if rows and "layer" not in rows[0])
    layers = next(rows for rows in spec["datasets"].values() if rows and "layer" in rows[0])
    assert {row["layer"] for row in layers} == {"conv1", "conv2", "fc1", "fc2"}  # the ones with arithmetic
    assert max(row["tflops"] for row in roofs if row["mode"] == "AMP") == 989.5
    assert max(row["tflops"] for row in roofs if row["mode"] == "strict fp32") == 67.0
    # Each layer under its own kind's rate in its mode: the lab's fp32 has TF32 convolutions and fp32 linear layers.
    rate = {("AMP", "c"): "bf16", ("AMP", "f"): "bf16", ("TF32", "c"): "tf32", ("TF32", "f"): "tf32",
            ("fp32 as the lab ran it", "c"): "tf32", ("fp32 as the lab ran it", "f"): "fp32",
            ("strict fp32", "c"): "fp32", ("strict fp32", "f"): "fp32"}
    for row in layers:  # on or under its roof: the bandwidth's slope at its intensity, capped by the peak
        assert row["tflops"] == pytest.approx(min(peaks[rate[row["mode"], row["layer"][0]]], 4.8 * row["intensity"]))
    conv2 = {row["mode"]: row for row in layers if row["layer"] == "conv2"}
    assert conv2["AMP"]["intensity"] == pytest.approx(2 * conv2["strict fp32"]["intensity"])  # half the bytes
    assert {row["mode"] for row in layers} == set(rate_mode for rate_mode, _ in rate)


def test_the_ladder_chart_draws_each_run_rung_and_other_peoples_times_only_for_the_whole_workload():
    from ui.learn_charts import ladder_chart

    rung = {"name": "the lab's loop", "seconds": [12.0, 10.0, 11.0], "test_accuracy": 0.7,
            "speedup_vs_lab": {"median": 1.0}, "compile_s": None}
    skipped = {"name": "CUDA graphs", "seconds": [], "why_not": "no GPU"}
    full = {"quick": False, "references": {"the lab's fp32 run (its GPU)": 75.0, "airbench94 (94%)": 3.29},
            "rungs": [rung, skipped]}
    spec = ladder_chart(full).to_dict()
    bars = next(rows for rows in spec["datasets"].values() if rows and "rung" in rows[0])
    assert bars == [{"rung": "the lab's loop", "seconds": 11.0, "accuracy": 0.7, "speedup": 1.0, "compile_s": None}]
    lines = next(rows for rows in spec["datasets"].values() if rows and "who" in rows[0])
    assert {row["who"] for row in lines} == {"the lab's fp32 run (its GPU)", "airbench94 (94%)"}
    quick = ladder_chart({**full, "quick": True}).to_dict()
    assert not any(rows and "who" in rows[0] for rows in quick["datasets"].values())  # a short run: no lines
