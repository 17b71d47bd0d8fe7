"""Chart builders and the lab's table, checked on hand-made results."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ui_fixtures import lab_pair, make_result
from trainer.comparison_table import MEMORY_SHORT_NAMES
from trainer.results import MEMORY_LABELS
from ui import charts

ROOT = Path(__file__).resolve().parents[2]


def rows(chart) -> list[dict]:
    spec = chart.to_dict()
    (dataset,) = spec["datasets"].values()
    return dataset


def layer_or_self(spec: dict) -> dict:
    return spec["layer"][0] if "layer" in spec else spec


def tooltip_fields(spec: dict) -> list[str]:
    return [t["field"] for t in layer_or_self(spec)["encoding"]["tooltip"]]


@pytest.fixture
def runs():
    return charts.run_labels(list(lab_pair()))


def test_run_labels_name_runs_by_precision_and_number_repeats():
    labelled = charts.run_labels([make_result("fp32"), make_result("amp-bf16"), make_result("fp32")])
    assert list(labelled) == ["FP32", "AMP (bf16)", "FP32 #2"]
    assert charts.numbered(["FP32", "FP32", "FP32"]) == ["FP32", "FP32 #2", "FP32 #3"]


def test_time_chart_has_bars_with_the_improvement_written_on_them(runs):
    spec = charts.time_chart(runs).to_dict()
    bars, text = spec["layer"]
    assert bars["mark"]["type"] == "bar" and text["mark"]["type"] == "text"
    assert bars["encoding"]["x"]["field"] == "seconds" and bars["encoding"]["y"]["field"] == "run"
    # The axis leaves room after the longest bar for the text written after it.
    assert bars["encoding"]["x"]["scale"]["domain"] == [0, 75.0 * charts.TEXT_ROOM]
    assert text["mark"]["align"] == "left"
    assert {"run", "seconds", "change"} <= set(tooltip_fields(spec))
    data = rows(charts.time_chart(runs))
    assert [(r["run"], r["seconds"]) for r in data] == [("FP32", 75.0), ("AMP (fp16)", 48.0)]
    assert data[0]["change"] == "baseline"
    assert data[1]["change"] == "1.56x faster (36% less time)"  # in the tooltip; on the bar, its first half
    assert data[1]["short"] == "1.56x faster" and text["encoding"]["text"]["field"] == "short"


def test_repeated_pairs_are_each_compared_with_their_own_baseline():
    # fp32 75 s, AMP 48 s, then a slower fp32 80 s and AMP 40 s: the second AMP run is 2.00x its own pair's fp32.
    first, second = lab_pair("amp-bf16"), lab_pair("amp-bf16")
    second[0].total_time_s, second[1].total_time_s = 80.0, 40.0
    changes = [row["change"] for row in rows(charts.time_chart(charts.run_labels([*first, *second])))]
    assert changes == ["baseline", "1.56x faster (36% less time)", "baseline", "2.00x faster (50% less time)"]


def test_every_run_is_coloured_by_its_precision_on_every_chart():
    results = [*lab_pair("amp-bf16"), *lab_pair("amp-bf16")]
    runs = charts.run_labels(results)
    colours = [charts.PRECISION_COLOURS[mode] for mode in ("fp32", "amp-bf16", "fp32", "amp-bf16")]
    specs = [charts.time_chart(runs).to_dict()["layer"][0], charts.memory_chart(runs).to_dict(),
             charts.epoch_time_chart(runs).to_dict(), charts.throughput_chart(runs).to_dict(),
             charts.loss_chart(charts.loss_series(runs), precisions=charts.run_precisions(runs)).to_dict()]
    for spec in specs:
        scale = spec["encoding"]["color"]["scale"]
        assert scale["domain"] == list(runs) and scale["range"] == colours
    # Two runs of one mode share a colour; on the line charts their dashes tell them apart.
    for spec in (specs[2], specs[4]):
        assert spec["encoding"]["strokeDash"]["field"] == "run"


def test_memory_chart_groups_bars_per_memory_figure(runs):
    chart = charts.memory_chart(runs)
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["y"]["field"] == "figure" and spec["encoding"]["x"]["field"] == "megabytes"
    assert spec["encoding"]["yOffset"]["field"] == "run"
    assert {"run", "description", "megabytes"} <= set(tooltip_fields(spec))
    allocated = [r for r in rows(chart) if r["figure"] == charts.wrapped(MEMORY_SHORT_NAMES["torch_max_allocated"])]
    assert [(r["run"], r["megabytes"]) for r in allocated] == [("FP32", 1800.0), ("AMP (fp16)", 1100.0)]
    assert allocated[0]["description"] == MEMORY_LABELS["torch_max_allocated"]
    assert len(rows(chart)) == 4


def test_epoch_time_chart_draws_one_line_per_run(runs):
    chart = charts.epoch_time_chart(runs)
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "line"
    assert spec["encoding"]["x"]["field"] == "epoch" and spec["encoding"]["color"]["field"] == "run"
    assert {"run", "epoch", "seconds"} <= set(tooltip_fields(spec))
    points = [(r["run"], r["epoch"]) for r in rows(chart)]
    assert points == [("FP32", 1), ("FP32", 2), ("AMP (fp16)", 1), ("AMP (fp16)", 2)]
    assert rows(chart)[0]["seconds"] == pytest.approx(45.0)


def test_loss_chart_overlays_finished_runs(runs):
    chart = charts.loss_chart(charts.loss_series(runs))
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "line"
    assert spec["encoding"]["x"]["field"] == "step" and spec["encoding"]["y"]["field"] == "loss"
    assert {"run", "step", "epoch", "loss"} <= set(tooltip_fields(spec))
    assert len(rows(chart)) == 8
    assert rows(chart)[0] == {"run": "FP32", "step": 8, "epoch": 1, "loss": 2.2}


def test_overlapping_loss_lines_stay_apart_and_the_axis_keeps_its_digits(runs):
    spec = charts.loss_chart(charts.loss_series(runs)).to_dict()
    encoding = spec["encoding"]
    assert encoding["strokeDash"]["field"] == encoding["shape"]["field"] == encoding["color"]["field"] == "run"
    assert encoding["strokeDash"]["legend"] is not None  # one merged legend: colour, dash and marker
    (param,) = spec["params"]
    assert param["bind"] == "legend" and "condition" in encoding["opacity"]
    assert encoding["y"]["axis"]["format"] == "~g"  # ".2f" printed 2.30 on every tick of a narrow live range


def test_a_tiny_difference_between_losses_is_not_drawn_as_a_cliff():
    close = {"FP32": [{"step": 1, "loss": 2.30000}, {"step": 2, "loss": 2.30002}],
             "AMP (bf16)": [{"step": 1, "loss": 2.30001}, {"step": 2, "loss": 2.30002}]}
    low, high = charts.loss_chart(close).to_dict()["encoding"]["y"]["scale"]["domain"]
    assert high - low == pytest.approx(charts.MIN_LOSS_AXIS_SHARE * 2.30002)  # 0.115 wide, not 2e-5
    assert low < 2.30000 and high > 2.30002
    falling = {"FP32": [{"step": 1, "loss": 2.3}, {"step": 2, "loss": 1.4}]}
    assert charts.loss_chart(falling).to_dict()["encoding"]["y"]["scale"] == {"zero": False}  # fitted to the data


def test_bar_labels_are_dark_and_names_lie_one_per_row_wrapped(runs):
    time_spec = charts.time_chart(runs).to_dict()
    assert time_spec["layer"][1]["encoding"]["color"] == {"value": charts.LABEL_COLOUR}
    name_axes = [time_spec["layer"][0]["encoding"]["y"], charts.memory_chart(runs).to_dict()["encoding"]["y"],
                 charts.throughput_chart(runs).to_dict()["encoding"]["y"]]
    for axis in name_axes:  # names on the y axis, one row each: they cannot collide at any width
        assert axis["type"] == "nominal" and axis["axis"]["labelLimit"] == charts.LABEL_LIMIT_PX
    # Long memory figures are broken into short lines that the axis splits; run names break at their comma only
    # ("AMP (bf16)" over "pair 2 of 3"), in the legends too.
    assert name_axes[1]["axis"]["labelExpr"] == charts.WRAPPED_LABELS
    assert name_axes[0]["axis"]["labelExpr"] == name_axes[2]["axis"]["labelExpr"] == charts.RUN_LABELS
    assert charts.memory_chart(runs).to_dict()["encoding"]["color"]["legend"]["labelExpr"] == charts.RUN_LABELS
    assert charts.wrapped("GPU in use, all processes (nvidia-smi)").split(charts.LINE_BREAK) == [
        "GPU in use, all", "processes", "(nvidia-smi)"]
    # Charts that name every run on an axis need no legend; the others list the runs one per line.
    assert time_spec["layer"][0]["encoding"]["color"]["legend"] is None
    assert charts.memory_chart(runs).to_dict()["encoding"]["color"]["legend"]["columns"] == 1
    # A legend below a line chart adds to its height, so the plot keeps its own however many runs it lists.
    assert len(runs) == 2
    two, six = charts.epoch_time_chart(runs), charts.loss_chart({f"run {i}": [] for i in range(6)})
    assert six.to_dict()["height"] - two.to_dict()["height"] == 4 * charts.LEGEND_ENTRY_PX
    pairs = charts.loss_chart({f"FP32, pair {i} of 6": [] for i in range(6)})  # two lines an entry: taller still
    assert pairs.to_dict()["height"] > six.to_dict()["height"]


def test_loss_chart_takes_live_points_and_an_empty_run():
    chart = charts.loss_chart({"FP32": [{"step": 1, "epoch": 1, "loss": 2.3}], "AMP (bf16)": []})
    assert rows(chart) == [{"run": "FP32", "step": 1, "epoch": 1, "loss": 2.3}]
    assert chart.to_dict()["encoding"]["color"]["scale"]["domain"] == ["FP32", "AMP (bf16)"]
    assert "scale" not in chart.to_dict()["encoding"]["x"]
    live = charts.loss_chart({"FP32": [{"step": 1, "epoch": 1, "loss": 2.3}]}, last_step=40)
    assert live.to_dict()["encoding"]["x"]["scale"]["domain"] == [0, 40]


def test_throughput_chart_leaves_out_runs_without_a_steady_figure():
    labelled = charts.run_labels([make_result("fp32"), make_result("amp-bf16", steady_images_per_s=None)])
    chart = charts.throughput_chart(labelled)
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "bar" and spec["encoding"]["x"]["field"] == "steady"
    assert {"run", "steady", "overall", "warmup_steps"} <= set(tooltip_fields(spec))
    assert [r["run"] for r in rows(chart)] == ["FP32"]


def test_throughput_chart_without_any_steady_figure_says_why_in_its_title():
    labelled = charts.run_labels([make_result("fp32", steady_images_per_s=None)])
    spec = charts.throughput_chart(labelled).to_dict()
    assert "every step was a warm-up step" in " ".join(spec["title"])
    assert max(len(line) for line in spec["title"]) <= 32  # short lines: a half-width chart cut one long line off
    assert spec["encoding"]["x"]["axis"] is None  # no bare axis ticking 0.000000


def test_comparison_table_is_a_frame_of_the_shared_table():
    frame = charts.comparison_table(*lab_pair())
    assert list(frame.columns) == ["Metric", "FP32", "AMP fp16 + GradScaler", "Improvement"]
    assert frame.iloc[0].tolist() == ["Training time (2 epochs)", "75.0 s", "48.0 s", "1.56x faster (36% less time)"]
    assert list(charts.lab_reference_table().columns) == ["Metric", "FP32 (lab)", "AMP (lab)", "Improvement"]


@pytest.mark.slow
def test_chart_and_table_builders_do_not_import_streamlit():
    modules = "ui.charts, ui.exports, ui.experiment, ui.lab_code, lessons.interpret, server.choices, server.offer"
    code = f"import sys, {modules}; print('streamlit' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_every_precision_mode_has_a_colour_of_its_own():
    from trainer.config import TRAINING_PRECISIONS

    assert set(charts.PRECISION_COLOURS) == set(TRAINING_PRECISIONS)  # the deliberate failures' too
    assert len(set(charts.PRECISION_COLOURS.values())) == len(TRAINING_PRECISIONS)
    scale = charts.precision_scale(["amp-bf16", "fp32-default", "amp-bf16"]).to_dict()
    assert scale == {"domain": ["fp32-default", "amp-bf16"],
                     "range": [charts.PRECISION_COLOURS["fp32-default"], charts.PRECISION_COLOURS["amp-bf16"]]}


def test_the_class_chart_colours_each_mode_as_the_other_charts_do():
    from lessons.verdicts import ClassRow
    from ui.exports import class_frame

    rows = [ClassRow(name, 1_780_000_000.0, "Test CPU", "fp32", mode, 1.2, None, None, 1, "-", None, None, None,
                     name * 32) for name, mode in (("a", "fp32-default"), ("b", "amp-bf16"))]
    colour = charts.class_speedup_chart(class_frame(rows)).to_dict()["layer"][0]["encoding"]["color"]
    assert colour["scale"]["domain"] == ["fp32-default", "amp-bf16"]
    assert colour["scale"]["range"] == [charts.PRECISION_COLOURS["fp32-default"], charts.PRECISION_COLOURS["amp-bf16"]]
