"""Out of memory, whatever the library called it: recorded messages, and real runs under a memory limit."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.config import RunConfig
from trainer.errors import is_out_of_memory
from trainer.isolated import run_isolated

REPO = Path(__file__).resolve().parents[2]
HEADROOM = 3 * 2**30  # room above what torch needs after import; the run below asks for 4 GiB in one tensor
# 4096 images through width 8's first convolution: one 4 GiB float32 activation.
TOO_BIG = dict(data="synthetic", device="cpu", loader="resident", batch_size=4096, subset=4096, test_subset=64,
               width=8, epochs=1, num_workers=0)

# A child's address space capped at what it holds once torch is imported plus HEADROOM, so the cap fits any
# machine (thread pools and BLAS buffers grow with the core count) and only the run's big allocation fails.
SITECUSTOMIZE = f"""
import resource
import numpy, torch

with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + {HEADROOM}, size + {HEADROOM}))
"""


@pytest.mark.parametrize(
    "message",
    [
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)",
        "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "GET was unable to find an engine to execute this computation",
    ],
)
def test_allocation_failures_raised_as_plain_runtime_errors_are_out_of_memory(message):
    assert is_out_of_memory(RuntimeError(message))


def test_out_of_memory_types_count_whatever_their_message():
    assert is_out_of_memory(torch.OutOfMemoryError("pretend the allocator failed"))
    assert is_out_of_memory(MemoryError())


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x2)"),
        RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"),
        ValueError("out of memory"),
    ],
)
def test_other_failures_are_not(error):
    assert not is_out_of_memory(error)


@pytest.fixture
def memory_capped_env(tmp_path) -> dict:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": os.pathsep.join((str(tmp_path), str(REPO)))}


@pytest.mark.slow
def test_the_command_line_says_out_of_memory_in_one_line_under_a_memory_limit(memory_capped_env):
    args = [f"--{key.replace('_', '-')}={value}" for key, value in TOO_BIG.items() if key != "num_workers"]
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "run", *args, "--workers=0"], capture_output=True, text=True,
        cwd=REPO, env={**os.environ, **memory_capped_env}, timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "batch size 4096 does not fit in host memory" in done.stderr
    assert "try a batch size of 2048" in done.stderr


@pytest.mark.slow
def test_an_app_run_under_a_memory_limit_is_recorded_as_out_of_memory(memory_capped_env):
    outcome = run_isolated(RunConfig(**TOO_BIG), env=memory_capped_env)
    assert (outcome.status, outcome.error_kind) == ("failed", "OutOfMemoryError"), outcome.error
    assert "does not fit in host memory" in outcome.error
