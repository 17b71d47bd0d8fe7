from dataclasses import replace

import pytest

from server.estimate import coarse_column, coarse_run_seconds, estimate_job_seconds, estimate_run_seconds
from server.history import HistoryStore
from server.records import JobSpec, JobView
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.results import RunResult


def record_run(store: HistoryStore, job_id: str, config: RunConfig, images_per_s: float, wall_s: float, device="cpu"):
    """Save a finished one-run job whose run trained `config.subset` images per epoch at `images_per_s`."""
    result = RunResult(
        config=replace(config),
        environment={"device_type": device},
        total_time_s=config.epochs * config.subset / images_per_s,
        epoch_times_s=[],
        steady_images_per_s=images_per_s,
        peak_memory={},
        loss_history=[],
        test_accuracy=None,
        train_images=config.subset,
    )
    store.save_job(
        JobView(
            id=job_id,
            learner_id="s",
            kind="run",
            label="",
            status="done",
            queue_position=None,
            estimated_wait_s=None,
            current_run=0,
            progress=None,
            live_losses=[],
            outcomes=[RunOutcome(config, "ok", result=result)],
            error=None,
            spec=JobSpec("run", [config]),
            created_at=1.0,
            started_at=1.0,
            finished_at=2.0,
            extras={"device_type": device, "run_wall_s": [wall_s]},
        )
    )


@pytest.fixture
def store(tmp_path):
    return HistoryStore(tmp_path / "history.sqlite3")


def test_coarse_table_grows_with_the_work():
    base = RunConfig(epochs=1, subset=10_000, loader="resident")
    one = coarse_run_seconds(base, "cpu")
    assert one > 0
    assert coarse_run_seconds(RunConfig(epochs=4, subset=10_000, loader="resident"), "cpu") > one
    assert coarse_run_seconds(RunConfig(epochs=1, subset=10_000, loader="resident", width=4), "cpu") > one
    assert coarse_run_seconds(RunConfig(epochs=1, subset=10_000, loader="resident", batch_size=8), "cpu") > one
    assert coarse_run_seconds(RunConfig(epochs=1, subset=10_000, loader="dataloader"), "cuda") > coarse_run_seconds(
        RunConfig(epochs=1, subset=10_000, loader="resident"), "cuda"
    )
    slow = coarse_run_seconds(RunConfig(epochs=1, subset=10_000, loader="resident", precision="amp-fp16"), "cpu")
    assert slow > 10 * one  # fp16 autocast on a CPU has no fast kernels


def test_unknown_combinations_give_none():
    assert coarse_run_seconds(RunConfig(precision="tf32"), "cpu") is None
    assert estimate_run_seconds(RunConfig(), None, "mps") is None
    spec = JobSpec("compare", [RunConfig(precision="fp32"), RunConfig(precision="tf32")])
    assert estimate_job_seconds(spec, None, "cpu") is None


def test_history_gives_throughput_and_fixed_overhead(store):
    past = RunConfig(epochs=1, subset=1000, batch_size=256, loader="resident", precision="amp-bf16")
    record_run(store, "1" * 32, past, images_per_s=500.0, wall_s=6.0)  # 2 s steady training + 4 s fixed
    record_run(store, "2" * 32, past, images_per_s=500.0, wall_s=6.0)
    planned = RunConfig(epochs=3, subset=2000, batch_size=256, loader="resident", precision="amp-bf16")
    assert estimate_run_seconds(planned, store, "cpu") == pytest.approx(3 * 2000 / 500 + 4.0)
    # Another precision, device or loader has no history: the coarse table answers.
    other = RunConfig(epochs=3, subset=2000, batch_size=256, loader="resident", precision="fp32")
    assert estimate_run_seconds(other, store, "cpu") == pytest.approx(coarse_run_seconds(other, "cpu"))
    assert estimate_run_seconds(planned, store, "cuda") == pytest.approx(coarse_run_seconds(planned, "cuda"))


def test_history_prefers_runs_with_a_similar_batch_size(store):
    small = RunConfig(epochs=1, subset=1000, batch_size=64, loader="resident")
    large = RunConfig(epochs=1, subset=1000, batch_size=2048, loader="resident")
    record_run(store, "1" * 32, small, images_per_s=100.0, wall_s=10.0)
    record_run(store, "2" * 32, large, images_per_s=1000.0, wall_s=1.0)
    near_small = RunConfig(epochs=1, subset=1000, batch_size=128, loader="resident")
    near_large = RunConfig(epochs=1, subset=1000, batch_size=4096, loader="resident")
    assert estimate_run_seconds(near_small, store, "cpu") == pytest.approx(10.0)
    assert estimate_run_seconds(near_large, store, "cpu") == pytest.approx(1.0)


def test_job_estimate_is_the_sum_of_its_runs(store):
    runs = [RunConfig(epochs=2, subset=5000, precision=p) for p in ("fp32", "amp-bf16")]
    total = estimate_job_seconds(JobSpec("compare", runs), store, "cpu")
    assert total == pytest.approx(sum(estimate_run_seconds(run, store, "cpu") for run in runs))


def test_a_minimum_steady_time_adds_the_epochs_the_loop_will_add(store):
    past = RunConfig(epochs=1, subset=1000, batch_size=20, loader="resident", precision="amp-bf16")
    record_run(store, "1" * 32, past, images_per_s=500.0, wall_s=6.0)  # 2 s steady training + 4 s fixed
    point = RunConfig(epochs=1, subset=200, batch_size=20, warmup_steps=2, loader="resident", precision="amp-bf16",
                      min_steady_s=1.5)
    # 0.4 s an epoch, 0.08 s of it warm-up: 4 epochs reach 1.5 s after warm-up
    assert estimate_run_seconds(point, store, "cpu") == pytest.approx(4 * 0.4 + 4.0)
    fp32_point = RunConfig.from_dict({**point.to_dict(), "precision": "fp32"})  # fast on every CPU row
    without = RunConfig.from_dict({**fp32_point.to_dict(), "min_steady_s": 0.0})
    assert coarse_run_seconds(fp32_point, "cpu") > coarse_run_seconds(without, "cpu")


def test_history_counts_the_epochs_a_run_trained_not_those_configured(store):
    past = RunConfig(epochs=1, subset=1000, batch_size=20, loader="resident", min_steady_s=1.5)
    record_run(store, "1" * 32, past, images_per_s=500.0, wall_s=10.0)
    job = store.get_job("1" * 32)
    job.outcomes[0].result.epoch_times_s = [2.0, 2.0, 2.0]  # the loop added two epochs to reach min_steady_s
    store.save_job(job)
    (timing,) = store.run_timings("cpu", "fp32", "resident", 1)
    assert timing.epochs == 3


def test_a_cpu_without_amx_gets_the_slower_measured_bf16_row(monkeypatch):
    from server import estimate

    bf16 = RunConfig(epochs=1, subset=10_000, loader="resident", precision="amp-bf16")
    fp32 = RunConfig(epochs=1, subset=10_000, loader="resident")
    monkeypatch.setattr(estimate, "cpu_has_amx", lambda: True)
    assert coarse_run_seconds(bf16, "cpu") < coarse_run_seconds(fp32, "cpu")  # AMX: bf16 faster than fp32
    monkeypatch.setattr(estimate, "cpu_has_amx", lambda: False)
    monkeypatch.setattr(estimate, "cpu_flags", lambda: [])
    assert coarse_run_seconds(bf16, "cpu") > 5 * coarse_run_seconds(fp32, "cpu")  # emulated bf16: far slower
    monkeypatch.setattr(estimate, "cpu_flags", lambda: ["avx512f", "avx512_bf16"])  # bf16 instructions, no AMX
    assert coarse_run_seconds(bf16, "cpu") < coarse_run_seconds(fp32, "cpu")
    fp16 = RunConfig(epochs=1, subset=10_000, loader="resident", precision="amp-fp16-unscaled")
    assert coarse_run_seconds(fp16, "cpu") > 10 * coarse_run_seconds(fp32, "cpu")  # a failure runs as amp-fp16


def test_a_repeated_comparison_counts_every_pair(store):
    pair = [RunConfig(epochs=1, subset=2000, loader="resident", precision=p) for p in ("fp32", "amp-bf16")]
    one = estimate_job_seconds(JobSpec("compare", pair), store, "cpu")
    assert estimate_job_seconds(JobSpec("compare", pair * 3).check_shape(), store, "cpu") == pytest.approx(3 * one)


def test_fp32_default_reads_fp32_on_a_cpu_and_tf32_on_a_gpu():
    assert coarse_column("fp32-default", "cpu") == "fp32"  # no TF32 on a CPU: the same computation
    assert coarse_column("fp32-default", "cuda") == "tf32"  # PyTorch's defaults: convolutions in TF32
    assert [coarse_column(mode, "cpu") for mode in ("fp32", "tf32", "amp-bf16")] == ["fp32", "tf32", "amp-bf16"]
    default, strict, tf32 = (RunConfig(epochs=1, subset=10_000, loader="resident", precision=p)
                             for p in ("fp32-default", "fp32", "tf32"))
    assert coarse_run_seconds(default, "cpu") == coarse_run_seconds(strict, "cpu")
    assert coarse_run_seconds(default, "cuda") == coarse_run_seconds(tf32, "cuda") < coarse_run_seconds(strict, "cuda")
    assert coarse_run_seconds(RunConfig(precision="fp32-default"), "mps") is None
