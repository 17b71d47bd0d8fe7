"""A run's share of the cores on a server of several GPUs: dealt in blocks, pinned, and fewer loader workers."""

import os

import pytest
import torch

from trainer.config import RunConfig
from trainer.cpu_share import CORES_VARIABLE, format_cores, loader_workers, parse_cores, split_cores
from trainer.run import run_training


def test_cores_are_dealt_in_blocks_and_written_as_nvidia_smi_and_taskset_do():
    assert split_cores(16, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert [len(block) for block in split_cores(10, 4)] == [3, 3, 2, 2]  # the remainder to the first
    assert split_cores(2, 8)[7] == [1]  # more workers than cores: one each, shared
    assert format_cores([0, 1, 2, 3, 8]) == "0-3,8" and parse_cores("0-3,8") == [0, 1, 2, 3, 8]
    with pytest.raises(ValueError, match="AMP_LAB_CPU_CORES='a-b' is not a list of cores"):
        parse_cores("a-b")
    with pytest.raises(ValueError, match="empty or negative range: 3-1"):
        parse_cores("3-1")


def test_a_share_keeps_a_core_for_the_loop_and_at_least_one_worker():
    assert loader_workers(4, None) == 4  # no share: what the run asked for
    assert loader_workers(4, [0, 1, 2, 3]) == 3 and loader_workers(4, [5]) == 1 and loader_workers(0, [0, 1]) == 0


@pytest.mark.slow
def test_a_run_given_one_core_is_pinned_to_it_and_says_how_many_workers_it_had(monkeypatch):
    core = sorted(os.sched_getaffinity(0))[0]
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    monkeypatch.setenv(CORES_VARIABLE, str(core))
    try:
        result = run_training(RunConfig(data="synthetic", device="cpu", loader="dataloader", num_workers=2,
                                        epochs=1, batch_size=32, subset=64, test_subset=32, warmup_steps=1))
        assert os.sched_getaffinity(0) == {core} and torch.get_num_threads() == 1
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)
    assert result.environment["cpu_cores"] == str(core) and result.environment["loader_workers"] == 1
    assert any(w.startswith("1 DataLoader worker, not the 2 asked for") for w in result.warnings)
