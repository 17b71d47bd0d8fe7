import pytest
import torch

from lessons.autocast_lists import (
    FOLLOWS,
    FP32,
    LOW,
    PROBES,
    WIDEST,
    classify,
    classify_isolated,
    has_autocast_rule,
    ops_in,
    rules_on,
)
from trainer.errors import ConfigError


@pytest.fixture(scope="module")
def cpu_bf16():
    return {p.op: p for p in classify("cpu")}


def test_matrix_products_run_in_bf16_on_the_cpu(cpu_bf16):
    for op in ("conv2d", "linear", "matmul", "bmm"):
        assert cpu_bf16[op].category == LOW and cpu_bf16[op].from_fp32 == "bfloat16"


def test_cpu_fp32_list_is_losses_prod_and_cdist_not_softmax_or_sums(cpu_bf16):
    # The CPU list differs from CUDA's: softmax, exp, log, sum and the norms are on no CPU list (torch 2.14).
    assert {"cross_entropy", "nll_loss", "mse_loss", "prod", "cdist"} <= set(ops_in(cpu_bf16.values(), FP32))
    for op in ("softmax", "log_softmax", "exp", "log", "sum", "layer_norm", "group_norm", "relu", "max_pool2d"):
        assert cpu_bf16[op].category == FOLLOWS, op
        assert (cpu_bf16[op].from_fp32, cpu_bf16[op].from_low) == ("float32", "bfloat16")


def test_each_category_agrees_with_the_dispatcher(cpu_bf16):
    for policy in cpu_bf16.values():
        assert policy.has_rule == (policy.category in (LOW, FP32, WIDEST)), policy.op
    assert cpu_bf16["stack"].category == WIDEST
    assert cpu_bf16["addcmul"].category == FOLLOWS  # CUDA's promote list; the CPU has no rule for it


def test_fp16_on_the_cpu_uses_the_same_lists():
    by_op = {p.op: p.category for p in classify("cpu", torch.float16)}
    assert by_op == {p.op: p.category for p in classify("cpu")}


def test_cuda_rules_are_readable_without_a_gpu():
    cuda = rules_on("cuda")
    # CUDA's autocast has its own rule (fp32) for softmax, exp, log, sum and layer_norm; the CPU's has none.
    for op in ("softmax", "log_softmax", "exp", "log", "sum", "layer_norm", "group_norm"):
        assert cuda[op] and not rules_on("cpu")[op], op
    assert cuda["conv2d"] and not cuda["relu"]
    assert set(cuda) == {p.name for p in PROBES}
    with pytest.raises(ConfigError):
        has_autocast_rule("aten::relu", "mps")


@pytest.mark.slow
def test_isolated_classification_round_trips():
    assert [p.to_dict() for p in classify_isolated("cpu")] == [p.to_dict() for p in classify("cpu")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fp32_list_holds_softmax_and_sums():
    by_op = {p.op: p for p in classify("cuda")}
    assert by_op["conv2d"].category == LOW and by_op["conv2d"].from_fp32 == "float16"
    for op in ("softmax", "log_softmax", "exp", "log", "sum", "layer_norm", "cross_entropy"):
        assert by_op[op].category == FP32, op
    assert by_op["relu"].category == FOLLOWS


def test_cudas_list_for_an_op_is_read_from_the_dispatcher_and_the_docs_promote_list():
    """Issue 32: addcmul has a CUDA autocast rule, but the rule is the promote (widest input) one, not fp32."""
    from lessons.autocast_lists import FOLLOWS, FP32, LOW, NO_RULE, WIDEST, cuda_list, cuda_rules_for

    assert cuda_list("addcmul", FOLLOWS) == WIDEST and cuda_list("softmax", FOLLOWS) == FP32
    assert cuda_list("conv2d", LOW) == LOW and cuda_list("relu", FOLLOWS) == NO_RULE
    split = cuda_rules_for(["relu", "softmax", "addcmul", "sum"])
    assert split == {FP32: ["softmax", "sum"], WIDEST: ["addcmul"]}
