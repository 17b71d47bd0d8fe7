"""The safeguards lesson on real runs: without its GradScaler amp-fp16 loses gradients to underflow once they are
small, and without fp32 master weights updates round away; the readings say so, and say when they do not."""

from dataclasses import replace

import pytest

from lessons.safeguards import (
    ROUNDING_SHOWN,
    UNDERFLOW_SHOWN,
    final_losses,
    fp16_spacing,
    fp16_sum,
    largest_layer_weight,
    rounding_reading,
    underflow_reading,
)
from server.offer import Offer
from server.settings import Settings
from trainer.capabilities import DeviceFacts, mode_support
from trainer.run import run_training

SMALL = dict(subset=128, batch_size=8, test_subset=32, device="cpu", data="synthetic")  # 16 steps: ~2 s a run


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The lesson's own pairs, as the offer builds them for a CPU server, trained at a smaller size."""
    root = tmp_path_factory.mktemp("data")
    offer = Offer(Settings(state_dir=str(root), data_root=str(root), device="cpu"), mode_support(DeviceFacts("cpu")))

    def trained(safeguard: str, shrink: int = 0):
        spec = offer.safeguard_demo(safeguard, shrink)
        return [run_training(replace(run, **SMALL)) for run in spec.runs]

    return {"shrunk": trained("no-scaler", 16), "lab": trained("no-scaler", 0),
            "pure": trained("no-master-weights")}


@pytest.mark.slow
def test_without_the_scaler_small_gradients_underflow_and_the_reading_says_how_many(pairs):
    scaled, unscaled = pairs["shrunk"]
    assert (scaled.precision, unscaled.precision) == ("amp-fp16", "amp-fp16-unscaled")
    assert unscaled.zero_grad_share - scaled.zero_grad_share >= UNDERFLOW_SHOWN
    reading = underflow_reading(scaled, unscaled)
    assert reading.shown and reading.sentence.startswith("With the loss times 2^-16, ")
    assert "underflow zeroed about" in reading.sentence
    guarded_end, unguarded_end = final_losses(scaled, unscaled)
    assert unguarded_end > guarded_end  # the scaled run learned; the other lost most of its gradients


@pytest.mark.slow
def test_at_the_labs_own_loss_the_reading_says_the_scaler_is_insurance_here(pairs):
    scaled, unscaled = pairs["lab"]
    reading = underflow_reading(scaled, unscaled)
    assert not reading.shown and "the scaler is insurance" in reading.sentence
    assert abs(unscaled.zero_grad_share - scaled.zero_grad_share) < UNDERFLOW_SHOWN


@pytest.mark.slow
def test_without_fp32_master_weights_updates_round_away(pairs):
    master, pure = pairs["pure"]
    assert (master.precision, pure.precision) == ("amp-fp16", "fp16-true")
    assert pure.stalled_update_share >= ROUNDING_SHOWN > master.stalled_update_share
    reading = rounding_reading(master, pure)
    assert reading.shown and reading.sentence.startswith(f"With the weights in fp16, {pure.stalled_update_share:.1%}")
    assert any("deliberate failure" in warning for warning in pure.warnings)


def test_the_fp16_arithmetic_is_torchs():
    assert fp16_sum(1.0, 1e-4) == 1.0 and fp16_sum(1.0, 1e-3) > 1.0
    assert fp16_spacing(1.0) == 2.0**-10 and fp16_spacing(0.01) == 2.0**-17
    name, weight = largest_layer_weight()
    # PyTorch's default init draws U(-1/sqrt(4096), 1/sqrt(4096)): the median |weight| is half the bound, 1/128.
    assert name == "classifier.0.weight" and weight == pytest.approx(1 / 128, rel=0.02)


def test_a_pair_that_counted_nothing_says_so():
    from tests.ui_fixtures import make_result

    reading = underflow_reading(make_result("amp-fp16"), make_result("amp-fp16-unscaled"))
    assert not reading.shown and reading.sentence == "These runs did not count their gradients."
