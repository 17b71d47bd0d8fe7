import math

import pytest
import torch

from lessons.scaler_sim import ScalerSettings, inf_pattern, parse_steps, simulate, simulate_gradients
from trainer.errors import ConfigError


def drive_real_scaler(found_inf: list[bool], settings: ScalerSettings) -> tuple[list[float], list[int]]:
    """Run torch.amp.GradScaler on the CPU over one parameter whose gradient we set to inf or a finite value."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler(
        "cpu",
        init_scale=settings.init_scale,
        growth_factor=settings.growth_factor,
        backoff_factor=settings.backoff_factor,
        growth_interval=settings.growth_interval,
    )
    scales, skipped = [], []
    for step, bad in enumerate(found_inf, start=1):
        optimizer.zero_grad()
        scaler.scale(param.sum())  # initialises the scale lazily, as a real backward would
        param.grad = torch.tensor([math.inf if bad else 1.0])
        before = param.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        if torch.equal(before, param.detach()):
            skipped.append(step)
    return scales, skipped


@pytest.mark.parametrize(
    "settings",
    [
        ScalerSettings(init_scale=1024.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=3),
        ScalerSettings(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2),
        ScalerSettings(init_scale=2.0**126, growth_factor=4.0, backoff_factor=0.5, growth_interval=1),
    ],
)
def test_simulator_matches_torch_grad_scaler(settings):
    flags = inf_pattern(24, [1, 2, 3, 7, 11, 12, 20])
    real_scales, real_skipped = drive_real_scaler(flags, settings)
    trace = simulate(flags, settings)
    assert trace.scales_after == real_scales
    assert trace.skipped_steps == real_skipped == [1, 2, 3, 7, 11, 12, 20]


def test_scale_never_grows_into_inf():
    trace = simulate([False] * 5, ScalerSettings(init_scale=2.0**126, growth_factor=4.0, growth_interval=1))
    assert all(math.isfinite(s) for s in trace.scales_after)
    assert trace.scales_after[-1] == 2.0**126


def test_first_steps_skipped_until_the_scale_fits():
    # Largest gradient 4: 65536*4 and 32768*4 and 16384*4 overflow 65504; 8192*4 fits.
    trace = simulate_gradients([4.0] * 10, ScalerSettings(growth_interval=100))
    assert trace.skipped_steps == [1, 2, 3]
    assert [s.scale_used for s in trace.steps[:5]] == [65536.0, 32768.0, 16384.0, 8192.0, 8192.0]


def test_extra_inf_steps_and_growth():
    trace = simulate_gradients([1e-3] * 12, ScalerSettings(init_scale=8.0, growth_interval=4), extra_inf_steps=[6])
    assert trace.skipped_steps == [6]
    assert trace.scales_after == [8, 8, 8, 16, 16, 8, 8, 8, 8, 16, 16, 16]


def test_parse_steps():
    assert parse_steps("3, 10-12; 40", 50) == [3, 10, 11, 12, 40]
    assert parse_steps("", 10) == []
    with pytest.raises(ConfigError):
        parse_steps("0", 10)
    with pytest.raises(ConfigError):
        parse_steps("a-b", 10)


@pytest.mark.parametrize(
    "settings",
    [ScalerSettings(init_scale=0), ScalerSettings(growth_factor=1.0), ScalerSettings(backoff_factor=1.5),
     ScalerSettings(growth_interval=0)],
)
def test_bad_settings_are_config_errors(settings):
    with pytest.raises(ConfigError):
        simulate([False], settings)


def test_a_product_between_65504_and_65520_still_fits():
    from lessons.scaler_sim import ScalerSettings, simulate_gradients

    fits = simulate_gradients([65519.0 / 65536.0], ScalerSettings(init_scale=65536.0))
    assert fits.skipped_steps == []
    overflows = simulate_gradients([65520.0 / 65536.0], ScalerSettings(init_scale=65536.0))
    assert overflows.skipped_steps == [1]


def test_a_real_runs_skips_are_sorted_by_cause():
    from lessons.scaler_sim import classify_skips

    # Start at 2^24: steps 1-3 skipped (the search down to 2^21); grows after step 6 to 2^22 and step 7 overflows
    # (a probe); step 10 overflows at 2^21, which had worked for steps 8 and 9 (a larger gradient).
    scales = {1: 2**23, 2: 2**22, 3: 2**21, 4: 2**21, 5: 2**21, 6: 2**22, 7: 2**21, 8: 2**21, 9: 2**21, 10: 2**20}
    history = [{"step": step, "scale": float(scale)} for step, scale in scales.items()]
    kinds = classify_skips(2.0**24, history, [1, 2, 3, 7, 10])
    assert (kinds.search, kinds.probes, kinds.larger, kinds.halvings) == ([1, 2, 3], [7], [10], 5)
    assert classify_skips(65536.0, [], []).halvings == 0
