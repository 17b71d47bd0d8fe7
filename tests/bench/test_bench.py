"""The benchmark harness on tiny synthetic data: the plain loop trains, the harness writes a valid report."""

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.plain_loop import train_plain
from bench.run_bench import (
    BASELINE,
    Row,
    assess_targets,
    bench_configs,
    bench_environment,
    compare_rows,
    format_table,
    main,
    parse_args,
    resolve_modes,
    run_order,
)
from trainer.loaders import load_split
from trainer.precision import set_tf32, tf32_flags

REPO_ROOT = Path(__file__).resolve().parents[2]
# Five runs of 8 steps each on the CPU: fp32 with both loaders, plain and trainer, and the lab's default-malloc loop.
TINY_BENCH = ["--device", "cpu", "--data", "synthetic", "--modes", "fp32", "--subset", "128", "--batch-size", "16",
              "--epochs", "1", "--repeats", "1", "--workers", "0", "--test-subset", "32"]


@pytest.fixture(scope="module")
def tiny_split():
    return load_split("synthetic", "./data", train=True, limit=96, seed=0)


@pytest.mark.parametrize(
    "precision, loader, channels_last",
    [("fp32", "dataloader", False), ("fp32", "resident", False), ("amp-bf16", "resident", True)],
)
def test_plain_loop_counts_steady_steps_after_warmup(tiny_split, precision, loader, channels_last):
    result = train_plain(
        tiny_split, precision=precision, loader=loader, batch_size=16, device=torch.device("cpu"), epochs=2,
        warmup_steps=3, channels_last=channels_last, num_workers=0,
    )
    assert result.total_steps == 12  # 96 images / 16 per batch, twice
    assert result.steady_steps == 9
    assert result.steady_images == 9 * 16
    assert result.images_per_s == pytest.approx(result.steady_images / result.steady_time_s)
    assert result.ms_per_step == pytest.approx(1000 * result.steady_time_s / 9)
    assert result.total_time_s >= result.steady_time_s > 0
    assert math.isfinite(result.final_loss)


def test_plain_loop_reports_no_rate_when_warmup_covers_every_step(tiny_split):
    result = train_plain(
        tiny_split, precision="fp32", loader="resident", batch_size=32, device=torch.device("cpu"), epochs=1,
        warmup_steps=5,
    )
    assert result.total_steps == 3
    assert result.steady_steps == 0
    assert result.images_per_s is None and result.ms_per_step is None


def test_modes_always_start_with_the_fp32_baseline():
    assert resolve_modes(None, "cpu") == ["fp32", "amp-bf16"]
    assert resolve_modes(None, "cuda") == ["fp32", "amp-fp16"]
    assert resolve_modes("amp-bf16,fp32,amp-bf16", "cpu") == ["fp32", "amp-bf16"]
    with pytest.raises(SystemExit, match="tf32"):
        resolve_modes("tf32", "cpu")


def test_configs_pair_plain_and_trainer_and_add_channels_last_for_amp_only():
    labels = [c.label() for c in bench_configs(["fp32", "amp-bf16"], "cuda")]
    assert len(labels) == 10
    assert labels[:2] == ["plain fp32 dataloader", "trainer fp32 dataloader"]
    assert labels[-2:] == ["plain amp-bf16 resident channels_last", "trainer amp-bf16 resident channels_last"]
    assert not any("fp32 resident channels_last" in label for label in labels)


def test_the_loaders_can_be_narrowed_to_the_resident_data_alone():
    """The GPU kit's bench: its DataLoader cells are step 3's, so its bench measures where the step is shortest."""
    labels = [c.label() for c in bench_configs(["fp32", "amp-fp16"], "cuda", ("resident",))]
    assert labels == [f"{impl} {cell}" for cell in ("fp32 resident", "amp-fp16 resident",
                                                    "amp-fp16 resident channels_last") for impl in ("plain", "trainer")]
    on_cpu = bench_configs(["fp32", "amp-bf16"], "cpu", ("dataloader",))
    assert [c.label() for c in on_cpu] == ["plain fp32 dataloader tuned-malloc", "trainer fp32 dataloader tuned-malloc",
                                           "plain amp-bf16 dataloader tuned-malloc",
                                           "trainer amp-bf16 dataloader tuned-malloc", "plain fp32 dataloader"]
    with pytest.raises(SystemExit):
        parse_args(["--loaders", "tfrecord"])


def test_on_cpu_the_pairs_use_the_trainers_malloc_and_the_lab_baseline_keeps_the_default():
    configs = bench_configs(["fp32", "amp-bf16"], "cpu")
    paired, extra = configs[:10], configs[10:]
    assert all(c.malloc == "tuned" for c in paired)
    assert [c.label() for c in extra] == ["plain fp32 dataloader", "plain amp-bf16 resident channels_last"]
    assert extra[0].key == BASELINE


def test_every_other_repeat_swaps_each_pair_and_keeps_the_unpaired_runs():
    configs = bench_configs(["fp32", "amp-bf16", "amp-fp16"], "cpu")
    assert run_order(configs, 0) == configs
    swapped = run_order(configs, 1)
    assert sorted(map(str, swapped)) == sorted(map(str, configs))
    assert [c.implementation for c in swapped[:4]] == ["trainer", "plain", "trainer", "plain"]
    assert swapped[-3:] == configs[-3:]  # the three default-malloc plain runs have no partner


def _rows(cells):
    return [Row(*cell, images_per_s=rate, ms_per_step=256_000 / rate) for *cell, rate in cells]


def test_speedup_overhead_and_targets_from_known_figures():
    rows = _rows([
        ("plain", "fp32", "dataloader", False, "tuned", 1500.0),
        ("trainer", "fp32", "dataloader", False, "tuned", 1425.0),
        ("plain", "amp-bf16", "dataloader", False, "tuned", 2000.0),
        ("plain", "amp-bf16", "resident", True, "tuned", 4000.0),
        ("trainer", "amp-bf16", "resident", True, "tuned", 3960.0),
        ("plain", "fp32", "dataloader", False, "default", 1000.0),
    ])
    compare_rows(rows)
    assert rows[4].speedup_vs_lab_fp32 == pytest.approx(3.96)  # against the default-malloc lab loop
    assert rows[2].speedup_vs_fp32 == pytest.approx(2000 / 1500)  # same loop, loader and malloc
    assert rows[4].speedup_vs_fp32 is None  # no trainer fp32 resident row to compare with
    assert rows[1].overhead_pct == pytest.approx(100 * (1500 / 1425 - 1))
    assert rows[0].overhead_pct is None and rows[5].overhead_pct is None
    speedup, overhead = assess_targets(rows, "cpu", 256)
    assert speedup["met"] is True and speedup["conditions_match"] is True
    assert overhead["met"] is False  # fp32 DataLoader costs ~5.3% in the trainer
    assert overhead["worst_configuration"] == "trainer fp32 dataloader tuned-malloc"
    table = format_table(rows)
    assert "3.96x" in table and "default" in table and "tuned" in table


def test_speedup_target_is_not_met_by_the_untuned_plain_loop_alone():
    rows = _rows([
        ("plain", "fp32", "dataloader", False, "default", 1000.0),
        ("plain", "amp-bf16", "resident", True, "default", 5000.0),
        ("trainer", "amp-bf16", "resident", True, "tuned", 2500.0),
    ])
    compare_rows(rows)
    speedup, _ = assess_targets(rows, "cpu", 256)
    assert speedup["value"] == pytest.approx(2.5) and speedup["met"] is False


@pytest.mark.slow
def test_harness_runs_end_to_end_and_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    status = main([*TINY_BENCH, "--json", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert report["finished"] is True and report["stopped"] is None
    assert report["command"].startswith("python -m bench.run_bench --device cpu")
    assert report["environment"]["device_type"] == "cpu"
    assert report["settings"]["warmup_steps"] >= 0
    rows = report["rows"]
    assert [(r["implementation"], r["loader"], r["malloc"]) for r in rows] == [
        ("plain", "dataloader", "tuned"), ("trainer", "dataloader", "tuned"), ("plain", "resident", "tuned"),
        ("trainer", "resident", "tuned"), ("plain", "dataloader", "default"),
    ]
    for row in rows:
        assert row["status"] == "ok", row["errors"]
        assert row["images_per_s"] > 0
        assert row["ms_per_step"] == pytest.approx(1000 * 16 / row["images_per_s"])
        assert len(row["repeats"]) == 1
        # each child reports the malloc it really ran with (tuned where glibc allows it)
        assert row["repeats"][0]["tuned_malloc"] is (row["malloc"] == "tuned" and platform.libc_ver()[0] == "glibc")
    assert rows[4]["speedup_vs_lab_fp32"] == pytest.approx(1.0)
    assert rows[1]["overhead_pct"] is not None
    speedup, overhead = report["targets"]
    assert speedup["met"] is None  # amp-bf16 was not run
    assert overhead["met"] in (True, False)
    printed = capsys.readouterr().out
    assert "trainer overhead" in printed and "images/s" in printed


def test_the_report_records_tf32_off_as_every_child_ran_it():
    before = tf32_flags()
    try:
        set_tf32(True)  # whatever the parent process had, the children trained with TF32 off
        environment = bench_environment("cpu")
        assert environment["cuda_matmul_allow_tf32"] is False and environment["cudnn_allow_tf32"] is False
    finally:
        set_tf32(before["cuda_matmul_allow_tf32"])


def _runs_done(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(len(row["repeats"]) for row in json.loads(path.read_text())["rows"])


@pytest.mark.slow
def test_a_bench_killed_part_way_leaves_every_finished_run_in_its_json(tmp_path):
    """Issue 22, item 4: the JSON is written after every run, not only at the end."""
    out = tmp_path / "bench.json"
    bench = subprocess.Popen([sys.executable, "-m", "bench.run_bench", *TINY_BENCH, "--json", str(out)],
                             cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _runs_done(out) == 0 and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(bench.pid, signal.SIGKILL)
        bench.wait()
    report = json.loads(out.read_text())
    assert report["finished"] is False and report["environment"] is None
    first = report["rows"][0]
    assert first["status"] == "ok" and first["images_per_s"] > 0 and len(first["repeats"]) == 1
    assert {row["status"] for row in report["rows"][1:]} <= {"ok", "not run"}
    assert any(row["status"] == "not run" for row in report["rows"])  # killed before the last of its five runs


@pytest.mark.slow
def test_no_run_starts_once_the_budget_is_spent_and_the_rest_are_marked_not_run(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main([*TINY_BENCH, "--budget", "0.5", "--json", str(out)]) == 1  # the first run starts at once
    report = json.loads(out.read_text())
    statuses = [row["status"] for row in report["rows"]]
    assert statuses == ["ok", "not run", "not run", "not run", "not run"]
    assert report["rows"][0]["images_per_s"] > 0 and report["rows"][1]["repeats"] == []
    assert report["finished"] is True and report["settings"]["budget_s"] == 0.5
    assert report["stopped"] == "the budget of 0.5 s ran out after 1 of 5 runs; the others were not started"
    assert "not run" in capsys.readouterr().out  # in the printed table too
