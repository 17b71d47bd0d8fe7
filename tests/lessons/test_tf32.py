from dataclasses import replace

import pytest
import torch

from lessons.tf32 import APP_DEFAULT, APP_STRICT, APP_TF32, LAB_DEFAULTS, NEW_API, _inherited, read_state, states


@pytest.mark.slow
def test_state_per_mode_from_a_fresh_torch():
    by_setting = {state.setting: state for state in states()}
    lab, strict, tf32 = by_setting[LAB_DEFAULTS], by_setting[APP_STRICT], by_setting[APP_TF32]
    # PyTorch's defaults: cuDNN convolutions may use TF32, matmuls are full fp32 (since 1.12).
    assert (lab.cuda_conv, lab.cuda_matmul) == ("tf32", "ieee")
    assert (strict.cuda_conv, strict.cuda_matmul) == ("ieee", "ieee")
    assert (tf32.cuda_conv, tf32.cuda_matmul) == ("tf32", "tf32")
    # fp32-default, after the two modes above changed the switches, is the lab's script again.
    assert replace(by_setting[APP_DEFAULT], setting=LAB_DEFAULTS) == lab
    # On the CPU, oneDNN's fp32 stays fp32 in every case unless a user asks otherwise.
    assert {(s.cpu_conv, s.cpu_matmul) for s in by_setting.values()} == {("ieee", "ieee")}
    assert {s.api for s in by_setting.values()} == {read_state("now").api}


def test_new_api_is_read_where_torch_has_it():
    assert read_state("now").api == (NEW_API if hasattr(torch.backends.cuda.matmul, "fp32_precision") else "allow_tf32")


def test_none_inherits_from_the_parent_setting():
    assert _inherited("none", "tf32", "ieee") == "tf32"
    assert _inherited("ieee", "tf32") == "ieee"
    assert _inherited("none", "none") == "ieee"
