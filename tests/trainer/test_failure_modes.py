"""The deliberate failures (amp-fp16-unscaled, fp16-true), the loss shrink that makes gradients small, and the
counts of zero gradients and rounded-away updates, on tiny real runs and on hand-made steps."""

import pytest
import torch
from torch import nn

from trainer.config import RunConfig, check_precision
from trainer.errors import ConfigError
from trainer.meters import UpdateTracker
from trainer.precision import PrecisionPolicy
from trainer.run import run_training

TINY = dict(data="synthetic", device="cpu", loader="resident", num_workers=0, test_subset=64, epochs=1,
            batch_size=16, subset=128, log_every=4, warmup_steps=1)


def test_a_shrunk_loss_with_a_grown_learning_rate_is_the_same_fp32_training_bit_for_bit():
    lab = run_training(RunConfig(precision="fp32", track_updates=True, **TINY))
    shrunk = run_training(RunConfig(precision="fp32", track_updates=True, loss_shrink_log2=16, **TINY))
    assert shrunk.loss_history == lab.loss_history  # the logged loss is the unshrunk one, and equal to the last bit
    assert shrunk.test_accuracy == lab.test_accuracy
    assert shrunk.update_counts == lab.update_counts  # the same zero gradients, the same updates


def test_an_untracked_run_records_no_counts():
    result = run_training(RunConfig(precision="fp32", **TINY))
    assert result.update_counts is None and result.update_history == []
    assert result.zero_grad_share is None and result.stalled_update_share is None


def test_each_failure_is_amp_fp16_with_one_safeguard_taken_away():
    unscaled = PrecisionPolicy.resolve("amp-fp16-unscaled", "cpu")
    assert unscaled.autocast_dtype == torch.float16 and not unscaled.use_scaler
    assert not unscaled.make_scaler().is_enabled() and unscaled.model_dtype is None
    assert "deliberate failure" in unscaled.warnings[0]

    pure = PrecisionPolicy.resolve("fp16-true", "cpu")
    assert not pure.uses_autocast and not pure.use_scaler and "deliberate failure" in pure.warnings[0]
    model = pure.prepare_model(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
    assert {p.dtype for p in model.parameters()} == {torch.float16}  # no fp32 master copy anywhere
    assert model(torch.ones(5, 4)).dtype == torch.float16  # fp32 inputs are cast on the way in
    plain = nn.Linear(4, 3)
    assert PrecisionPolicy.resolve("amp-fp16", "cpu").prepare_model(plain) is plain


def test_the_failures_are_known_by_name_and_the_trace_only_mode_is_not_trained():
    for name in ("amp-fp16-unscaled", "fp16-true"):
        check_precision(name)
        assert RunConfig(precision=name).is_failure
    assert not RunConfig(precision="amp-fp16").is_failure
    with pytest.raises(ConfigError, match="unknown precision 'bf16-true'"):
        check_precision("bf16-true")


@pytest.mark.parametrize("values, message", [
    ({"loss_shrink_log2": 25}, "loss_shrink_log2 must be between 0 and 24, got 25"),
    ({"loss_shrink_log2": 1.5}, "loss_shrink_log2 must be a whole number"),
    ({"track_updates": "yes"}, "track_updates is true or false"),
])
def test_the_new_settings_are_checked_in_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**values).validate()


def test_the_shrink_multiplies_the_loss_and_grows_the_learning_rate_by_the_same_power_of_two():
    config = RunConfig(lr=0.01, loss_shrink_log2=12)
    assert config.loss_factor == 2.0**-12 and config.optimizer_lr == 0.01 * 4096
    assert RunConfig().loss_factor == 1.0 and RunConfig().optimizer_lr == RunConfig().lr


def test_the_tracker_counts_zero_gradients_and_updates_that_round_away_in_fp16():
    weight = nn.Parameter(torch.ones(4, dtype=torch.float16))
    tracker = UpdateTracker([weight], enabled=True)
    optimizer = torch.optim.SGD([weight], lr=1.0)
    # fp16 numbers next to 1 are 2^-10 apart: an update of 1e-4 rounds away, one of 0.5 does not.
    weight.grad = torch.tensor([0.0, 1e-4, 0.5, 0.0], dtype=torch.float16)
    tracker.before_step()
    optimizer.step()
    tracker.after_step(1)
    tracker.flush(skipped=set())
    assert tracker.counts == {"steps": 1, "gradients": 4, "zero": 2, "moving": 2, "stalled": 1}
    assert tracker.history == [{"step": 1, "zero_grad_share": 0.5, "stalled_update_share": 0.5}]
    assert weight.tolist() == [1.0, 1.0, 0.5, 1.0]


def test_a_step_the_scaler_skipped_is_not_counted_as_updates_rounded_away():
    weight = nn.Parameter(torch.ones(2))
    tracker = UpdateTracker([weight], enabled=True)
    weight.grad = torch.tensor([0.25, 0.5])
    tracker.before_step()
    tracker.after_step(3)  # no optimizer step: the GradScaler skipped it
    tracker.flush(skipped={3})
    assert tracker.counts["stalled"] == 0 and tracker.counts["moving"] == 0
    assert tracker.history == [{"step": 3, "zero_grad_share": 0.0, "stalled_update_share": None}]


@pytest.mark.slow
def test_a_scaler_that_starts_far_too_high_skips_steps_that_are_not_counted_as_lost():
    result = run_training(RunConfig(precision="amp-fp16", track_updates=True, loss_scale_init=2.0**24,
                                    loss_scale_growth_interval=1000, **{**TINY, "batch_size": 8, "subset": 128}))
    assert 1 <= result.skipped_steps < 16  # 2^24 overflows the first steps' gradients, until it has backed off
    assert result.update_counts["steps"] == 16
    assert result.stalled_update_share < 0.01  # the updates of the steps taken were kept
