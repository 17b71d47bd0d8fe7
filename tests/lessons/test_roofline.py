"""The roofline's layers: their FLOPs are torch's count, their bytes follow the mode's element sizes, and each is
placed under its bound."""

import pytest

from lessons.roofline import FP32, HALF, layer_costs, place, ridge, step_bytes
from trainer.model import step_flops


@pytest.mark.parametrize("width, batch_size", [(1, 256), (2, 32), (4, 8)])
def test_the_layers_flops_add_up_to_torchs_count_in_either_mode(width, batch_size):
    for sixteen_bit in (False, True):
        layers = layer_costs(width, batch_size, sixteen_bit)
        assert sum(layer.flops for layer in layers) == sum(step_flops(width, batch_size).values())


def test_16_bit_activations_halve_the_layers_bytes_and_add_the_casts():
    fp32 = {layer.name: layer for layer in layer_costs(1, 256, sixteen_bit=False)}
    amp = {layer.name: layer for layer in layer_costs(1, 256, sixteen_bit=True)}
    assert amp["relu1"].bytes * FP32 == fp32["relu1"].bytes * HALF  # all 16-bit: exactly half
    assert fp32["pool1"].bytes / 2 < amp["pool1"].bytes < fp32["pool1"].bytes  # the int64 indices stay: not half
    assert amp["optimizer"].bytes == fp32["optimizer"].bytes  # the master weights and their update stay fp32
    assert "casts and scaler" in amp and "casts and scaler" not in fp32
    assert step_bytes(1, 256, True) < step_bytes(1, 256, False)
    # conv1 reads 256 fp32 images of 3x32x32 and writes 32x32x32 outputs: its forward alone is at least that.
    assert fp32["conv1"].bytes > 256 * (3 * 32 * 32 + 32 * 32 * 32) * FP32


def test_each_layer_is_bound_by_the_slower_of_its_arithmetic_and_its_bytes():
    layers = layer_costs(1, 256, sixteen_bit=True)
    points = {point.layer.name: point for point in place(layers, {"conv": 989.5, "linear": 989.5}, 4800.0)}
    assert points["relu1"].bound_by == "bytes" and points["relu1"].arithmetic_s == 0
    conv2 = points["conv2"]
    assert conv2.layer.intensity > ridge(989.5, 4800.0) * 0.5  # the lab's one layer with real arithmetic
    assert conv2.bound_s == max(conv2.arithmetic_s, conv2.bytes_s)
    assert ridge(989.5, 4800.0) == pytest.approx(989.5e12 / 4800e9)
