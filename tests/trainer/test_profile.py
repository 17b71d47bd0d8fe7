"""The profile of a short window: each operator in one category, the categories adding up to the window's step,
and a real run's profile recorded after its timed training."""

import pytest

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.profile import CATEGORIES, DATA_SPAN, UNCOVERED, category
from trainer.run import run_training


@pytest.mark.parametrize("name, expected", [
    ("aten::conv2d", "matrix products"), ("autograd::engine::evaluate_function: ConvolutionBackward0",
                                          "matrix products"),
    ("aten::linear", "matrix products"), ("autograd::engine::evaluate_function: AddmmBackward0", "matrix products"),
    ("aten::max_pool2d", "pooling"), ("autograd::engine::evaluate_function: MaxPool2DWithIndicesBackward0", "pooling"),
    ("aten::relu", "elementwise and activations"), ("autograd::engine::evaluate_function: ReluBackward0",
                                                    "elementwise and activations"),
    ("aten::cross_entropy_loss", "loss and scaler"), ("aten::_amp_foreach_non_finite_check_and_unscale_",
                                                      "loss and scaler"),
    ("Optimizer.step#SGD.step", "optimizer"), ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                               "optimizer"),
    ("aten::to", "casts and copies"), ("autograd::engine::evaluate_function: ToCopyBackward0", "casts and copies"),
    (DATA_SPAN, "waiting for data"),
])
def test_each_operator_falls_in_one_category(name, expected):
    assert category(name) == expected


@pytest.mark.slow
def test_a_profiled_run_records_its_step_by_kind_of_work_after_its_timed_window():
    config = RunConfig(precision="amp-bf16", data="synthetic", device="cpu", loader="resident", num_workers=0,
                       epochs=1, batch_size=64, subset=640, test_subset=64, warmup_steps=2, profile_steps=5)
    result = run_training(config)
    profile = result.profile
    assert profile["steps"] == 5 and list(profile["categories"]) == list(CATEGORIES)
    assert sum(profile["categories"].values()) == pytest.approx(profile["step_s"])  # they add up to the step
    assert profile["categories"]["matrix products"] > profile["categories"]["casts and copies"]
    assert profile["categories"][UNCOVERED] < 0.5 * profile["step_s"]  # the operators cover most of it
    steady_step = config.batch_size / result.steady_images_per_s
    assert 0.5 * steady_step < profile["step_s"] < 2 * steady_step  # the same step, measured a second way
    assert result.total_steps == 10  # the profiled steps are not counted as the run's
    assert profile["top_ops"][0]["s"] >= profile["top_ops"][-1]["s"]
    with pytest.raises(ConfigError, match="profile_steps must be between 0 and 200"):
        RunConfig(profile_steps=201).validate()
