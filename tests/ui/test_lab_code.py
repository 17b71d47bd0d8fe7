"""The teaching pages' code material: the diff of the lab scripts and the old spelling's warning."""

import pytest

from ui.lab_code import changed_lines, deprecation_warnings, script_diff


def test_diff_shows_the_three_amp_changes():
    diff = script_diff()
    assert diff.startswith("--- lab/fp32_baseline.py\n+++ lab/amp_training.py\n")
    added = [line for line in diff.splitlines() if line.startswith("+")]
    assert any("torch.amp.GradScaler(" in line for line in added)
    assert any("torch.autocast(" in line for line in added)
    assert any("scaler.step(optimizer)" in line for line in added)
    assert "-            loss.backward()" in diff.splitlines()


def test_changed_lines_counts_both_sides():
    removed, added = changed_lines()
    assert 0 < removed < added <= 30


@pytest.mark.slow
def test_the_deprecated_spelling_prints_future_warnings_pointing_to_torch_amp():
    warnings = deprecation_warnings()
    assert len(warnings) == 2
    assert all("FutureWarning" in w and "deprecated" in w for w in warnings)
    assert any("torch.amp.GradScaler('cuda'" in w for w in warnings)
    assert any("torch.amp.autocast('cuda'" in w for w in warnings)
