"""The lab scripts shown on the teaching pages: the lab's model, a small AMP diff, and they run."""

import difflib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.model import SimpleCNN

LAB = Path(__file__).resolve().parents[2] / "lab"
SCRIPTS = ("fp32_baseline.py", "amp_training.py")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), LAB / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_model_is_the_trainers_width_1_model(name):
    lab_shapes = [(n, tuple(p.shape)) for n, p in load_script(name).SimpleCNN().named_parameters()]
    trainer_shapes = [(n, tuple(p.shape)) for n, p in SimpleCNN(width=1).named_parameters()]
    assert lab_shapes == trainer_shapes


def test_amp_script_differs_from_the_baseline_only_by_a_few_lines():
    baseline = (LAB / "fp32_baseline.py").read_text().splitlines()
    amp = (LAB / "amp_training.py").read_text().splitlines()
    changed = [
        line for line in difflib.unified_diff(baseline, amp, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) <= 30
    added = "\n".join(line for line in changed if line.startswith("+"))
    assert "torch.amp.GradScaler(" in added and "torch.autocast(" in added
    assert "scaler.scale(loss).backward()" in added


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_uses_only_the_current_amp_api(name):
    assert "torch.cuda.amp" not in (LAB / name).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_script_trains_on_synthetic_data(name, tmp_path):
    done = subprocess.run(
        [sys.executable, str(LAB / name), "--synthetic", "--subset", "256", "--epochs", "1", "--batch-size", "64"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^Finished (fp32|AMP) training in \d+\.\d\d seconds$", done.stdout, re.MULTILINE)
