"""Download payloads: the runs as JSON and CSV, and the loss history as CSV."""

import io
import json
from pathlib import Path

import pandas as pd

from lessons.verdicts import ClassRow
from tests.ui_fixtures import lab_pair
from trainer.results import RunResult
from ui import charts, exports


def test_runs_json_round_trips_every_run_and_carries_the_comparison():
    runs = charts.run_labels(list(lab_pair()))
    payload = json.loads(exports.runs_json(runs, job_id="abc"))
    assert payload["job_id"] == "abc"
    assert [run["label"] for run in payload["runs"]] == ["FP32", "AMP (fp16)"]
    restored = RunResult.from_dict(payload["runs"][1])
    assert restored == runs["AMP (fp16)"]
    assert payload["comparisons"][0]["speedup"] == 75.0 / 48.0
    assert payload["speedup"] == {"median": 75.0 / 48.0, "low": None, "high": None, "pairs": 1,
                                  "note": "one pair of runs: the interval is unknown"}


def test_runs_json_compares_each_pair_of_a_repeated_comparison_and_gives_the_interval():
    """Three real alternating pairs from `compare --repeats 3` (tests/recorded/): pair i's AMP run against pair i's
    fp32 run, not against the first."""
    recorded = json.loads((Path(__file__).parents[1] / "recorded" / "repeated_compare_cpu.json").read_text())
    results = [RunResult.from_dict(run) for run in recorded["runs"]]
    payload = json.loads(exports.runs_json(charts.run_labels(results)))
    assert payload["speedup"] == recorded["speedup"]  # what the command line computed from these runs
    pairs = list(zip(results[0::2], results[1::2]))
    assert [c["speedup"] for c in payload["comparisons"]] == [b.total_time_s / c.total_time_s for b, c in pairs]


def test_runs_json_of_a_single_run_has_no_speedup():
    payload = json.loads(exports.runs_json(charts.run_labels([lab_pair()[0]])))
    assert payload["speedup"] is None and payload["comparisons"] == []


def test_runs_csv_has_one_row_per_run_with_the_main_figures():
    runs = charts.run_labels(list(lab_pair()))
    frame = pd.read_csv(io.StringIO(exports.to_csv(exports.runs_frame(runs))))
    assert frame["run"].tolist() == ["FP32", "AMP (fp16)"]
    assert frame["precision"].tolist() == ["fp32", "amp-fp16"]
    assert frame["total_time_s"].tolist() == [75.0, 48.0]
    assert frame["peak_torch_max_allocated_bytes"].tolist() == [1_800_000_000, 1_100_000_000]
    assert frame["test_accuracy"].tolist() == [0.50, 0.51]


def test_loss_csv_has_one_row_per_logged_point():
    runs = charts.run_labels(list(lab_pair()))
    frame = pd.read_csv(io.StringIO(exports.to_csv(exports.loss_frame(runs))))
    assert list(frame.columns) == ["run", "precision", "step", "epoch", "loss"]
    assert len(frame) == 8
    assert frame.iloc[0].tolist() == ["FP32", "fp32", 8, 1, 2.2]


def class_row(learner: str, speedup: float, low: float | None, high: float | None, pairs: int) -> ClassRow:
    return ClassRow(learner, 1_780_000_000.0, "Test CPU", "fp32", "amp-bf16", speedup, low, high, pairs,
                    "PyTorch allocated", 38.9, 0.5, 0.51, "a" * 32)


def test_the_class_csv_gives_a_repeated_speedup_its_range_and_one_pair_none():
    frame = pd.read_csv(io.StringIO(exports.to_csv(exports.class_frame(
        [class_row("Ada", 1.5625, 1.4583, 1.6667, 3), class_row("Bob", 1.2, None, None, 1)]))))
    figures = frame.set_index("learner")[["speedup (x)", "lowest speedup (x)", "highest speedup (x)", "pairs"]]
    assert figures.loc["Ada"].tolist() == [1.562, 1.458, 1.667, 3]
    assert figures.loc["Bob", "speedup (x)"] == 1.2 and figures.loc["Bob", "pairs"] == 1
    assert figures.loc["Bob", ["lowest speedup (x)", "highest speedup (x)"]].isna().all()
