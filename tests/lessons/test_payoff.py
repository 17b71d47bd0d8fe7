from dataclasses import replace

import pytest

from lessons.payoff import BreakdownRow, breakdown_sentence, summarize_breakdown, summarize_sweep, verdict
from server.offer import Offer
from server.settings import Settings
from trainer.config import RunConfig
from trainer.isolated import RunOutcome
from trainer.results import RunResult
from trainer.run import run_training

CPU_OFFER = Offer.for_device(Settings(class_mode=False), "cpu")


def result(precision, batch, images_per_s, width=1, memory=1000):
    config = RunConfig(precision=precision, batch_size=batch, width=width)
    return RunResult(config=config, environment={}, total_time_s=1.0, epoch_times_s=[1.0],
                     steady_images_per_s=images_per_s, peak_memory={"process_rss_growth": memory},
                     loss_history=[], test_accuracy=None)


def test_summarize_computes_speedup_at_the_same_point():
    rows = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 150.0),
                            result("fp32", 64, 80.0, width=2), result("amp-bf16", 64, 200.0, width=2)])
    assert [r.speedup for r in rows] == [None, pytest.approx(1.5), None, pytest.approx(2.5)]
    assert rows[0].peak_memory_bytes == 1000 and rows[0].memory_label == "process_rss_growth"


def test_summarize_keeps_failed_runs():
    oom = RunOutcome(config=RunConfig(precision="fp32", batch_size=4096), status="failed",
                     error="batch size 4096 does not fit", error_kind="OutOfMemoryError")
    ok = RunOutcome(config=RunConfig(precision="amp-fp16", batch_size=4096), status="ok",
                    result=result("amp-fp16", 4096, 900.0))
    rows = summarize_sweep([oom, ok])
    assert rows[0].status == "out of memory" and rows[0].images_per_s is None
    assert rows[1].status == "ok" and rows[1].speedup is None  # no fp32 figure to compare with
    assert "fp32 at batch 4096 (out of memory)" in verdict(rows)


def test_verdict_from_which_batch_amp_pays():
    rows = summarize_sweep([result("fp32", b, 100.0) for b in (64, 256, 512, 1024)]
                           + [result("amp-fp16", b, s)
                              for b, s in ((64, 98.0), (256, 101.0), (512, 130.0), (1024, 190.0))])
    text = verdict(rows)
    assert "amp-fp16 pays off from batch 512 on" in text and "1.30x" in text and "1.90x at batch 1024" in text


def test_verdict_when_amp_never_pays():
    rows = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 97.0),
                            result("fp32", 128, 100.0), result("amp-bf16", 128, 99.0)])
    assert verdict(rows) == (
        "On this machine, amp-bf16 did not pay off at any batch size tried: its best was 0.99x fp32's images/s, "
        "at batch 128."
    )


def test_verdict_everywhere_per_width_and_mixed():
    every = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 200.0),
                             result("fp32", 64, 100.0, width=2), result("amp-bf16", 64, 90.0, width=2)])
    text = verdict(every)
    assert text.startswith("At width 1, amp-bf16 pays off at every batch size tried")
    assert "At width 2, amp-bf16 did not pay off" in text
    mixed = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 150.0),
                             result("fp32", 128, 100.0), result("amp-bf16", 128, 100.0)])
    assert "paid off at batch 64 (1.50x) but not at 128 (1.00x). Results that jump around" in verdict(mixed)
    assert verdict([]) == "The sweep has no finished runs yet."


def test_no_verdict_until_every_point_is_in():
    rows = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 200.0), result("fp32", 256, 100.0)])
    assert verdict(rows, planned=4) == (
        "No verdict: only 3 of 4 runs are in, and the verdict needs every batch size measured in both modes."
    )
    rows += summarize_sweep([result("amp-bf16", 256, 210.0)])
    assert "pays off at every batch size tried" in verdict(rows, planned=4)


def test_a_sweep_point_timed_on_a_busy_machine_makes_the_verdict_uncertain():
    busy = result("amp-bf16", 256, 50.0)
    busy.timing_quality = {"verdict": "noisy", "cv": 0.4, "reasons": ["other processes used 60% of the 2 CPU cores"]}
    rows = summarize_sweep([result("fp32", 64, 100.0), result("amp-bf16", 64, 150.0), result("fp32", 256, 100.0),
                            busy])
    assert rows[3].noisy_reason == "other processes used 60% of the 2 CPU cores" and rows[0].noisy_reason is None
    assert verdict(rows).endswith(
        "Treat this as uncertain: 1 run(s) were timed while the machine was busy (amp-bf16 at batch 256; other "
        "processes used 60% of the 2 CPU cores); run the sweep again when it is quiet."
    )


@pytest.mark.slow
def test_a_real_tiny_sweep_through_the_trainer():
    plan = CPU_OFFER.admit(CPU_OFFER.sweep("amp-bf16", [32, 64], steps_per_run=2)).runs
    plan = [replace(c, subset=128, test_subset=32, min_steady_s=0.3, num_workers=0) for c in plan]
    results = [run_training(config) for config in plan]
    assert all(sum(r.epoch_times_s) >= 0.3 for r in results)
    rows = summarize_sweep(results)
    assert [(r.precision, r.batch_size) for r in rows] == [
        ("fp32", 32), ("amp-bf16", 32), ("fp32", 64), ("amp-bf16", 64)
    ]
    assert all(r.status == "ok" and r.images_per_s > 0 and r.peak_memory_bytes is not None for r in rows)
    assert rows[1].speedup == pytest.approx(rows[1].images_per_s / rows[0].images_per_s)
    text = verdict(rows)
    assert "amp-bf16" in text and ("pays off" in text or "did not pay off" in text or "paid off" in text)


def test_breakdown_plan_and_sentence_from_real_runs():
    plan = CPU_OFFER.admit(CPU_OFFER.breakdown("fp32", 32, steps=2)).runs
    assert [c.loader for c in plan] == ["dataloader", "resident"]
    assert all(c.breakdown and c.subset == 64 for c in plan)
    rows = summarize_breakdown([run_training(replace(plan[1], num_workers=0))])
    assert rows[0].loader == "resident" and rows[0].compute_s > 0 and 0 <= rows[0].data_share < 1
    assert "the resident loader" in breakdown_sentence(rows)


def test_breakdown_sentence_names_the_bound():
    rows = [BreakdownRow("dataloader", "fp32", 256, data_wait_s=6.0, compute_s=4.0, images_per_s=1000.0),
            BreakdownRow("resident", "fp32", 256, data_wait_s=0.1, compute_s=3.9, images_per_s=2500.0)]
    text = breakdown_sentence(rows)
    assert "With the lab's DataLoader, 60% of the training time went to waiting for data: the data pipeline" in text
    assert "With the resident loader, 2%" in text and "compute bounds this run" in text
    assert "2.50x the DataLoader's images/s" in text
    assert summarize_breakdown([result("fp32", 64, 1.0)]) == []  # no breakdown recorded


def test_on_a_cpu_the_dataloaders_workers_count_as_data_cost():
    # The case: 2% waiting, yet the resident loader 1.8x faster, because the workers took the cores.
    rows = [BreakdownRow("dataloader", "fp32", 256, data_wait_s=0.7, compute_s=37.3, images_per_s=1000.0,
                         worker_cpu_s=40.0, cores=2),
            BreakdownRow("resident", "fp32", 256, data_wait_s=0.1, compute_s=20.9, images_per_s=1810.0)]
    text = breakdown_sentence(rows)
    assert text.startswith(
        "With the lab's DataLoader, 2% of the training time went to waiting for data, and its workers used 40.0 s of "
        "CPU during 38.0 s of training, 53% of the 2 cores' time, taken from the training's own arithmetic on the "
        "same cores: the data pipeline, not arithmetic, bounds this run")
    assert "With the resident loader, 0%" in text and "compute bounds this run" in text
    assert rows[0].to_dict()["worker_share"] == pytest.approx(40 / 76)


def test_worker_cpu_is_read_from_cpu_results_only():
    def run(device_type):
        r = result("fp32", 64, 100.0)
        r.config.loader = "dataloader"
        r.data_wait_s, r.compute_s, r.worker_cpu_s = 0.1, 1.0, 0.8
        r.environment, r.timing_quality = {"device_type": device_type}, {"cores": 2}
        return r

    cpu, gpu = summarize_breakdown([run("cpu"), run("cuda")])
    assert (cpu.worker_cpu_s, cpu.cores) == (0.8, 2) and gpu.worker_cpu_s is None
