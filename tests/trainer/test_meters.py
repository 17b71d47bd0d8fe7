"""The meters: on-device loss sums read at log points and the loss scale's history."""

import pytest
import torch

from trainer.meters import LossMeter, ScaleTracker


def test_loss_meter_averages_since_the_last_reset():
    meter = LossMeter(torch.device("cpu"))
    for value in (1.0, 2.0, 3.0):
        meter.add(torch.tensor(value))
    assert meter.mean_and_reset() == pytest.approx(2.0)
    meter.add(torch.tensor(5.0, dtype=torch.bfloat16))
    assert meter.mean_and_reset() == pytest.approx(5.0)
    meter.add(torch.tensor(7.0))
    meter.reset()
    assert meter.count == 0


def test_scale_tracker_is_silent_for_a_disabled_scaler():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))])
    tracker = ScaleTracker(torch.amp.GradScaler("cpu", enabled=False), optimizer)
    tracker.after_update(1)
    assert tracker.history == [] and tracker.skipped == []


def test_scale_tracker_reads_the_scales_at_a_flush_and_marks_the_overflowed_step():
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    tracker = ScaleTracker(scaler, optimizer)
    for step, gradient in enumerate((1.0, float("inf"), 1.0), start=1):
        optimizer.zero_grad()
        scaler.scale((weight * gradient).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        tracker.after_update(step)
    assert tracker.history == []  # nothing read yet: no sync per step
    tracker.flush()
    assert tracker.history == [{"step": 1, "scale": 1024.0}, {"step": 2, "scale": 512.0}, {"step": 3, "scale": 512.0}]
    assert tracker.skipped == [2]


def test_the_scale_follows_gradscalers_rule_on_the_host_and_a_flush_checks_it(monkeypatch):
    """Issue 34: no device work per step (the scale was cloned on the GPU every amp-fp16 step): the step's fate
    comes from the optimizer's step hook, the scale from the rule, checked against the scaler's at each flush."""
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
    tracker = ScaleTracker(scaler, optimizer)
    for step, gradient in enumerate((1.0, 1.0, float("inf"), 1.0, 1.0), start=1):
        optimizer.zero_grad()
        scaler.scale((weight * gradient).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        tracker.after_update(step)
    tracker.flush()
    # grows after 2 good steps, halves at the skipped one, grows again after 2 more: as the scaler itself did
    assert [h["scale"] for h in tracker.history] == [256.0, 512.0, 256.0, 256.0, 512.0] == [
        256.0, 512.0, 256.0, 256.0, scaler.get_scale()]
    assert tracker.skipped == [3]
    monkeypatch.setattr(scaler, "get_scale", lambda: 7.0)  # a torch whose rule differs: its own scale wins
    tracker.after_update(6)
    tracker.flush()
    assert tracker.history[-1] == {"step": 6, "scale": 7.0}
