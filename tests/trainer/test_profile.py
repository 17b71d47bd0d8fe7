"""The profile of a short window: each operator in one category, the categories adding up to the window's step,
and a real run's profile recorded after its timed training."""

import pytest

from trainer.config import RunConfig
from trainer.errors import ConfigError
from trainer.profile import CATEGORIES, DATA_SPAN, UNCOVERED, category, likely_tensor_core
from trainer.run import run_training


@pytest.mark.parametrize("name, expected", [
    ("aten::conv2d", "matrix products"), ("autograd::engine::evaluate_function: ConvolutionBackward0",
                                          "matrix products"),
    ("aten::linear", "matrix products"), ("autograd::engine::evaluate_function: AddmmBackward0", "matrix products"),
    ("aten::max_pool2d", "pooling"), ("autograd::engine::evaluate_function: MaxPool2DWithIndicesBackward0", "pooling"),
    ("aten::relu", "elementwise and activations"), ("autograd::engine::evaluate_function: ReluBackward0",
                                                    "elementwise and activations"),
    ("aten::cross_entropy_loss", "loss and scaler"), ("aten::_amp_foreach_non_finite_check_and_unscale_",
                                                      "loss and scaler"),
    ("Optimizer.step#SGD.step", "optimizer"), ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                               "optimizer"),
    ("aten::to", "casts and copies"), ("autograd::engine::evaluate_function: ToCopyBackward0", "casts and copies"),
    (DATA_SPAN, "waiting for data"),
])
def test_each_operator_falls_in_one_category(name, expected):
    assert category(name) == expected


@pytest.mark.slow
def test_a_profiled_run_records_its_step_by_kind_of_work_after_its_timed_window():
    config = RunConfig(precision="amp-bf16", data="synthetic", device="cpu", loader="resident", num_workers=0,
                       epochs=1, batch_size=64, subset=640, test_subset=64, warmup_steps=2, profile_steps=5)
    result = run_training(config)
    profile = result.profile
    assert profile["steps"] == 5 and list(profile["categories"]) == list(CATEGORIES)
    assert sum(profile["categories"].values()) == pytest.approx(profile["step_s"])  # they add up to the step
    assert profile["categories"]["matrix products"] > profile["categories"]["casts and copies"]
    assert profile["categories"][UNCOVERED] < 0.5 * profile["step_s"]  # the operators cover most of it
    steady_step = config.batch_size / result.steady_images_per_s
    assert 0.5 * steady_step < profile["step_s"] < 2 * steady_step  # the same step, measured a second way
    assert result.total_steps == 10  # the profiled steps are not counted as the run's
    assert profile["top_ops"][0]["s"] >= profile["top_ops"][-1]["s"]
    with pytest.raises(ConfigError, match="profile_steps must be between 0 and 200"):
        RunConfig(profile_steps=201).validate()


@pytest.mark.parametrize("kernel, tensor_cores", [
    # fp32 FFMA kernels under an architecture prefix and a Tensor Core template's name: CUDA cores
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel",
     False),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_ffma_execute_segment_k_off_kernel", False),
    ("volta_sgemm_128x64_nn", False), ("implicit_convolve_sgemm", False),
    ("cutlass_80_simt_sgemm_128x128_8x5_nn_align1", False), ("nvjet_sss_128x64_64x4_2x1_v_bz_NNT", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", False),
    # Tensor Core math spelt out: an MMA tile, a TF32/16-bit type, a warpgroup MMA, Hopper's cuBLASLt types
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", True),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1",
     True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", True),
    ("volta_h884gemm_64x64_ldg8_nn", True), ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", True),
    ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTT", True), ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", True),
    ("nvjet_sm90_hss_320x128_64x3_2x1_v_bz_coopA_NNT", True),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_32x1_nn_align8>", True),
])
def test_a_kernel_is_marked_tensor_core_work_by_its_math_type_never_by_its_architecture(kernel, tensor_cores):
    assert likely_tensor_core(kernel) is tensor_cores


def test_the_host_waiting_for_the_gpu_is_its_own_kind_of_work():
    for name in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "aten::_local_scalar_dense", "aten::item"):
        assert category(name) == "waiting for the GPU"
