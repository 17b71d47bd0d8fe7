import numpy as np
import pytest

from lessons.capture import (
    KINDS,
    MAX_VALUES_PER_LAYER,
    capture_values,
    default_source,
    magnitude_summary,
    summaries,
)
from trainer.errors import ConfigError
from trainer.model import SimpleCNN


@pytest.fixture(scope="module")
def capture():
    return capture_values(source="synthetic", steps=2, batch_size=32)


def test_weights_and_gradients_have_every_parameter(capture):
    model = SimpleCNN()
    for name, param in model.named_parameters():
        assert capture.weights[name].shape == (param.numel(),)
        assert capture.gradients[name].shape == (param.numel(),)
        assert capture.weights[name].dtype == np.float32
    assert np.any(capture.all_values("gradients") != 0)
    assert len(capture.losses) == 2 and all(np.isfinite(capture.losses))


def test_activations_per_leaf_layer(capture):
    assert list(capture.activations) == [
        "features.0 (Conv2d)", "features.1 (ReLU)", "features.2 (MaxPool2d)",
        "features.3 (Conv2d)", "features.4 (ReLU)", "features.5 (MaxPool2d)",
        "classifier.0 (Linear)", "classifier.1 (ReLU)", "classifier.2 (Linear)",
    ]
    assert capture.activations["classifier.2 (Linear)"].shape == (32 * 10,)
    assert capture.activations["classifier.0 (Linear)"].shape == (32 * 512,)
    # The first conv's output (32*32*32*32 values) is sampled down.
    assert capture.activations["features.0 (Conv2d)"].shape == (MAX_VALUES_PER_LAYER,)
    assert set(capture.activation_gradients) == set(capture.activations)
    assert np.all(capture.activations["features.1 (ReLU)"] >= 0)


def test_by_kind_and_errors(capture):
    for kind in KINDS:
        assert capture.all_values(kind).size > 0
    with pytest.raises(ConfigError):
        capture.by_kind("biases")
    with pytest.raises(ConfigError):
        capture_values(steps=0)


def test_default_source_without_cifar(tmp_path):
    assert default_source(str(tmp_path)) == "synthetic"


def test_magnitude_summary_ignores_zeros_and_signs():
    summary = magnitude_summary(np.array([0.0, -1.0, 1e-3, 10.0, np.inf]))
    assert summary["count"] == 5 and summary["zeros"] == 1
    assert summary["min"] == pytest.approx(1e-3) and summary["max"] == 10.0 and summary["median"] == 1.0
    assert magnitude_summary(np.zeros(3))["median"] is None


def test_summaries_cover_every_kind(capture):
    rows = summaries(capture)
    assert [r["kind"] for r in rows] == list(KINDS)
    for row in rows:
        assert 0 < row["min"] <= row["p01"] <= row["median"] <= row["p99"] <= row["max"]
