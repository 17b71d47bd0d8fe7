"""The host malloc tuning: it takes effect in a fresh process, and it is what removes the page faults of a CPU step."""

import json
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainer.config import RunConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="malloc tuning needs glibc"
)

# Page faults per training step of the lab's model at batch 256 (the lab's) on the CPU, in a fresh interpreter.
FAULTS_PER_STEP = textwrap.dedent("""
    import json, resource, sys, torch
    from torch import nn
    from trainer import host_malloc
    from trainer.model import SimpleCNN
    state = host_malloc.tune_for_training() if sys.argv[1] == "tuned" else host_malloc.state()
    torch.manual_seed(0)
    model = SimpleCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,))
    def step():
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    for _ in range(3):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
    print(json.dumps({"tuned": state.tuned, "detail": state.detail, "faults_per_step": faults}))
""")


def _run_fresh(script: str, setting: str) -> dict:
    """Run `script` with `setting` as its argument in a fresh interpreter; its last stdout line is JSON."""
    done = subprocess.run([sys.executable, "-c", script, setting], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@glibc_only
def test_tuning_removes_the_page_faults_of_a_cpu_training_step():
    default, tuned = _run_fresh(FAULTS_PER_STEP, "default"), _run_fresh(FAULTS_PER_STEP, "tuned")
    assert default["tuned"] is False and default["detail"].startswith("default")
    assert tuned["tuned"] is True and "mmap_threshold=1 GiB" in tuned["detail"]
    # glibc's defaults map fresh pages for the big activations every step; tuned, the heap is reused.
    assert default["faults_per_step"] > 5000
    assert tuned["faults_per_step"] < default["faults_per_step"] / 10


@glibc_only
def test_tuning_is_idempotent_and_reported_in_the_environment():
    from trainer import host_malloc
    from trainer.environment import capture_environment

    first = host_malloc.tune_for_training()
    assert host_malloc.tune_for_training() is first
    assert capture_environment("cpu")["host_malloc"] == first.detail


@pytest.mark.slow
def test_cpu_runs_tune_malloc_unless_asked_not_to():
    assert RunConfig().tune_host_malloc is True
    script = textwrap.dedent("""
        import json, sys
        from trainer.config import RunConfig
        from trainer.run import run_training
        config = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32,
                           loader="resident", device="cpu", tune_host_malloc=sys.argv[1] == "tuned", warmup_steps=0)
        result = run_training(config)
        print(json.dumps({"malloc": result.environment["host_malloc"], "warnings": result.warnings}))
    """)
    outcome = {setting: _run_fresh(script, setting) for setting in ("default", "tuned")}
    assert outcome["default"]["malloc"].startswith("default")
    expected = "tuned" if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc" else "default"
    assert outcome["tuned"]["malloc"].startswith(expected)
    assert not any("malloc" in w for w in outcome["default"]["warnings"] + outcome["tuned"]["warnings"])


@glibc_only
def test_asking_for_the_default_after_tuning_is_a_warning_not_a_silent_lie():
    from trainer import host_malloc
    from trainer.run import run_training

    host_malloc.tune_for_training()
    config = RunConfig(precision="fp32", epochs=1, batch_size=32, data="synthetic", subset=64, test_subset=32,
                       loader="resident", device="cpu", tune_host_malloc=False, warmup_steps=0)
    result = run_training(config)
    assert result.environment["host_malloc"].startswith("tuned")
    assert any("fresh process" in w and "malloc" in w for w in result.warnings)
