"""The run's clock: synced time stamps, steady throughput, and a run's time figures."""

import torch

from trainer.clock import clock, steady_throughput


def test_steady_throughput_needs_images_and_time():
    assert steady_throughput(1000, 2.0) == 500.0
    assert steady_throughput(0, 2.0) is None
    assert steady_throughput(100, 0.0) is None


def test_clock_moves_forward():
    first = clock(torch.device("cpu"))
    assert clock(torch.device("cpu")) >= first
