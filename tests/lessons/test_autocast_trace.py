import pytest
import torch

from lessons.autocast_trace import TRACE_MODES, AutocastTrace, available_modes, trace_all_isolated, trace_dtypes
from trainer.errors import ConfigError

WEIGHTED = ("Conv2d", "Linear")


def by_kind(trace, kinds):
    return [row for row in trace.layers if row.kind in kinds]


def test_bf16_autocast_on_cpu():
    trace = trace_dtypes("amp-bf16", "cpu", batch_size=4)
    assert len(trace.layers) == 9
    for row in by_kind(trace, WEIGHTED):
        assert row.output_dtype == "bfloat16"
        assert row.weight_dtype == "float32"  # the master copy stays fp32
        assert row.weight_grad_dtype == "float32"
        assert row.output_grad_dtype == "bfloat16"
    assert trace.layers[0].input_dtype == "float32"  # autocast casts inside the op, not the input
    assert trace.logits_dtype == "bfloat16"
    assert trace.loss_dtype == "float32"  # cross_entropy autocasts to fp32


def test_fp16_autocast_on_cpu():
    trace = trace_dtypes("amp-fp16", "cpu", batch_size=2)
    conv = trace.layers[0]
    assert (conv.output_dtype, conv.weight_dtype, conv.weight_grad_dtype) == ("float16", "float32", "float32")
    assert trace.loss_dtype == "float32"


@pytest.mark.parametrize("mode,dtype", [("fp16-true", "float16"), ("bf16-true", "bfloat16")])
def test_pure_half_weights_have_no_fp32_anywhere(mode, dtype):
    trace = trace_dtypes(mode, "cpu", batch_size=2)
    for row in trace.layers:
        assert row.input_dtype == row.output_dtype == row.output_grad_dtype == dtype
    for row in by_kind(trace, WEIGHTED):
        assert row.weight_dtype == row.weight_grad_dtype == dtype
    assert trace.loss_dtype == dtype


def test_fp32_is_fp32_throughout():
    trace = trace_dtypes("fp32", "cpu", batch_size=2)
    assert {row.output_dtype for row in trace.layers} == {"float32"}
    assert trace.loss_dtype == "float32"
    assert [r.weight_dtype for r in trace.layers if r.kind == "ReLU"] == ["-", "-", "-"]


def test_modes_and_errors():
    assert available_modes("cpu") == list(TRACE_MODES)
    with pytest.raises(ConfigError):
        trace_dtypes("fp8", "cpu")


@pytest.mark.slow
def test_isolated_trace_round_trips_through_json():
    traces = trace_all_isolated("cpu", batch_size=2)
    assert [t.mode for t in traces] == list(TRACE_MODES)
    assert traces[2].layers[0].output_dtype == "bfloat16" and traces[2].loss_dtype == "float32"
    assert AutocastTrace.from_dict(traces[0].to_dict()) == traces[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fp16_autocast_on_cuda():
    trace = trace_dtypes("amp-fp16", "cuda", batch_size=4)
    assert trace.device == "cuda"
    assert trace.layers[0].output_dtype == "float16" and trace.layers[0].weight_dtype == "float32"
    assert trace.loss_dtype == "float32"


def test_the_reveal_says_which_layers_autocast_ran_in_16_bits_and_which_followed_their_input():
    from lessons.autocast_trace import sixteen_bit_outputs_reason

    def row(layer, kind, output):
        return {"layer": layer, "kind": kind, "output_dtype": output}

    layers = [row("features.0", "Conv2d", "bfloat16"), row("features.1", "ReLU", "bfloat16"),
              row("classifier.2", "Linear", "bfloat16"), row("extra", "Softmax", "float32")]
    assert sixteen_bit_outputs_reason(layers) == (
        "Autocast ran the 2 convolutions and linear layers in 16 bits (its lower-precision list), and the 1 layer "
        "after them (ReLU, max-pool) computes in the dtype their input comes in, so they output 16 bits too; extra "
        "kept fp32.")
