"""The lab's SimpleCNN and its width multiplier."""

import pytest
import torch

from trainer.config import WIDTHS
from trainer.errors import ConfigError
from trainer.model import SimpleCNN, build_model, count_parameters

# conv 3->32 (3x3), conv 32->64 (3x3), linear 64*8*8->512, linear 512->10, each with a bias.
LAB_PARAMETERS = (3 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (4096 * 512 + 512) + (512 * 10 + 10)


def test_width_one_is_the_labs_model():
    model = SimpleCNN(width=1)
    assert count_parameters(model) == LAB_PARAMETERS == 2_122_186
    assert model.features[0].out_channels == 32
    assert model.features[3].out_channels == 64
    assert model.classifier[0].in_features == 4096
    assert model.classifier[0].out_features == 512


@pytest.mark.parametrize("width", WIDTHS)
def test_every_width_scales_channels_and_hidden_units(width):
    with torch.device("meta"):  # shapes only: no memory for width 8's 130M parameters
        model = SimpleCNN(width=width)
        assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    c1, c2, hidden = 32 * width, 64 * width, 512 * width
    expected = (3 * c1 * 9 + c1) + (c1 * c2 * 9 + c2) + (c2 * 64 * hidden + hidden) + (hidden * 10 + 10)
    assert count_parameters(model) == expected


def test_unknown_width_is_a_config_error():
    with pytest.raises(ConfigError, match="width"):
        SimpleCNN(width=3)


def test_build_model_is_seeded_and_honours_channels_last():
    a = build_model(1, torch.device("cpu"), channels_last=True, seed=7)
    b = build_model(1, torch.device("cpu"), seed=7)
    assert a.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
