"""Download payloads: the runs as JSON and CSV, and the loss history as CSV."""

import io
import json

import pandas as pd
from ui_fixtures import lab_pair

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
