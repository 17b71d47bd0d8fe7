"""The loop: one step for every mode, the accuracy check, and epochs that take a new instrument without a change."""

import math

import pytest
import torch
from torch import nn

from trainer.clock import RunClock
from trainer.config import RunConfig
from trainer.loop import StepParts, evaluate, train_epochs, train_step
from trainer.meters import LossMeter, Meter, Meters, ScaleTracker
from trainer.precision import PrecisionPolicy
from trainer.progress import Reporter


@pytest.mark.parametrize("name", ["fp32", "amp-bf16", "amp-fp16"])
def test_train_step_is_one_function_for_every_mode(name):
    policy = PrecisionPolicy.resolve(name, "cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    loss = train_step(model, torch.randn(8, 3, 2, 2), torch.randint(0, 3, (8,)), optimizer, nn.CrossEntropyLoss(),
                      policy, policy.make_scaler())
    assert loss.dtype == torch.float32 and not loss.requires_grad
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_an_overflowing_fp16_step_is_skipped_and_halves_the_scale():
    policy = PrecisionPolicy.resolve("amp-fp16", "cpu")
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = policy.make_scaler()
    tracker = ScaleTracker(scaler, optimizer)
    before = model.weight.detach().clone()
    huge = lambda out, _labels: out.float().sum() * 1e35  # noqa: E731 - times the 65536 scale overflows fp32
    train_step(model, torch.ones(2, 4), torch.zeros(2, dtype=torch.long), optimizer, huge, policy, scaler)
    tracker.after_update(1)
    tracker.flush()
    assert torch.equal(model.weight, before)  # the step was skipped
    assert tracker.skipped == [1]
    assert tracker.history == [{"step": 1, "scale": 32768.0}]


def test_evaluate_counts_top1_hits_and_restores_train_mode():
    class Fixed(nn.Module):
        def forward(self, x):  # always predicts class 1
            return torch.tensor([[0.0, 1.0, 0.0]]).expand(x.shape[0], 3)

    model = Fixed().train()
    batches = [(torch.zeros(3, 1), torch.tensor([1, 0, 1])), (torch.zeros(1, 1), torch.tensor([2]))]
    seen = []
    assert evaluate(model, batches, PrecisionPolicy.resolve("fp32", "cpu"), on_batch=seen.append) == 0.5
    assert seen == [1, 2] and model.training


class CountingMeter(Meter):
    """A toy instrument: what the loop told it, and when it was asked to read."""

    def __init__(self):
        self.steps, self.reads = [], []

    def record(self, at, loss):
        self.steps.append((at.epoch, at.step, at.global_step, float(loss)))

    def read(self, at, epoch_end):
        self.reads.append((at.global_step, epoch_end))

    def fields(self):
        return {"counted": len(self.steps)}


def tiny_run(meter: Meter, sizes=(16, 16, 8), **settings):
    """Two epochs of batches of `sizes` images through train_epochs, with `meter` beside the run's own meters."""
    config = RunConfig(**{"epochs": 2, "batch_size": sizes[0], "log_every": 2, "warmup_steps": 1, "device": "cpu",
                          **settings})
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    policy = PrecisionPolicy.resolve("fp32", device)
    scaler = policy.make_scaler()
    parts = StepParts(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), policy, scaler)
    batches = [(torch.randn(n, 3, 2, 2), torch.randint(0, 3, (n,))) for n in sizes]
    clock = RunClock(config, device, len(batches))
    meters = Meters(LossMeter(device), [ScaleTracker(scaler, parts.optimizer), meter], config.log_every)
    reports = []
    train_epochs(parts, batches, clock, meters, Reporter(reports.append, None, config.epochs, config.batch_size))
    return clock, meters, reports


def test_a_new_meter_is_told_every_step_and_reads_at_log_points_and_epoch_ends_with_no_change_to_the_loop():
    meter = CountingMeter()
    clock, meters, reports = tiny_run(meter)
    assert [step[:3] for step in meter.steps] == [(1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 1, 4), (2, 2, 5), (2, 3, 6)]
    assert all(math.isfinite(step[3]) for step in meter.steps)
    assert meter.reads == [(2, False), (3, True), (5, False), (6, True)]  # log_every 2 within each epoch
    assert meters.fields()["counted"] == 6 and len(meters.fields()["epoch_losses"]) == 2
    logged = [(r.global_step, r.loss) for r in reports if r.loss is not None]
    assert logged == [(p["step"], p["loss"]) for p in meters.loss.history] and len(logged) == 2
    assert clock.fields(None)["total_steps"] == 6 and clock.first_partial_step["images"] == 8


def test_the_loop_reads_no_clock_per_step(monkeypatch):
    import trainer.clock

    reads = []
    real_clock = trainer.clock.clock
    monkeypatch.setattr(trainer.clock, "clock", lambda device: reads.append(1) or real_clock(device))
    sizes = (4,) * 19 + (2,)  # 20 steps an epoch, the last one partial
    clock, _, _ = tiny_run(CountingMeter(), sizes, log_every=100)
    # 40 steps: the start, the first step, the end of warm-up, 9 timing samples (every 4 of the 39 steady steps), the
    # 2 partial batches at both ends and the 2 epoch ends: 18 reads, none of them per step.
    assert clock.steps == 40 and len(reads) == 18
    reads.clear()
    tiny_run(CountingMeter(), sizes, log_every=100, breakdown=True)
    assert len(reads) == 18 + 40 * 3 + 2  # a breakdown asks for three more a step, and one at each epoch's end
