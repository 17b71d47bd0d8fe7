"""Every snippet of the Recipe page runs on the CPU and does what its comment says."""

import inspect

import pytest
import torch
import torch.nn.functional as F

from lessons import recipes
from lessons.recipes import RECIPES, make_scaler, tiny_classifier

FP16 = {"device_type": "cpu", "dtype": torch.float16}


def data(n=32, seed=1):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 16, generator=generator)
    return images, (images[:, 0] > 0).long() + 2 * (images[:, 1] > 0).long()


def setup(**scaler_kwargs):
    model = tiny_classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **scaler_kwargs) if scaler_kwargs else make_scaler("cpu", torch.float16)
    return model, optimizer, scaler


def test_clipping_sees_unscaled_gradients_and_an_overflow_still_skips():
    model, optimizer, scaler = setup()
    images, labels = data()
    losses = [recipes.step_with_clipping(model, optimizer, scaler, images, labels, **FP16, max_norm=0.5)
              for _ in range(30)]
    assert losses[-1] < losses[0]
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert norm <= 0.5 + 1e-3  # clipped at true size: on scaled gradients, 0.5 would clip nothing useful
    model, optimizer, scaler = setup(init_scale=2.0**40)  # scaled gradients overflow fp16
    before = [p.detach().clone() for p in model.parameters()]
    recipes.step_with_clipping(model, optimizer, scaler, images, labels, **FP16)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 2.0**39


def test_accumulating_four_micro_batches_matches_one_big_batch():
    images, labels = data()
    big, big_opt, big_scaler = setup()
    recipes.step_with_accumulation(big, big_opt, big_scaler, [(images, labels)], device_type="cpu",
                                   dtype=torch.bfloat16)
    small, small_opt, small_scaler = setup()
    micro = list(zip(images.split(8), labels.split(8)))
    recipes.step_with_accumulation(small, small_opt, small_scaler, micro, device_type="cpu", dtype=torch.bfloat16)
    for a, b in zip(big.parameters(), small.parameters()):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=0)  # bf16 products differ only in rounding


def test_the_scaler_state_survives_a_checkpoint(tmp_path):
    model, optimizer, scaler = setup(init_scale=2.0**20, growth_interval=3)
    images, labels = data()
    for _ in range(5):
        recipes.step_with_clipping(model, optimizer, scaler, images, labels, **FP16)
    recipes.save_checkpoint(tmp_path / "ckpt.pt", model, optimizer, scaler, epoch=3)
    fresh_model, fresh_optimizer, fresh_scaler = setup()
    assert fresh_scaler.get_scale() == 65536.0
    assert recipes.load_checkpoint(tmp_path / "ckpt.pt", fresh_model, fresh_optimizer, fresh_scaler) == 3
    assert fresh_scaler.state_dict() == scaler.state_dict()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh_model.parameters()))


def test_evaluation_and_inference_under_autocast():
    model, optimizer, scaler = setup()
    images, labels = data(64)
    for _ in range(40):
        recipes.step_with_clipping(model, optimizer, scaler, images, labels, **FP16)
    accuracy = recipes.evaluate(model, [(images[:32], labels[:32]), (images[32:], labels[32:])], **FP16)
    assert 0.5 < accuracy <= 1 and model.training
    probabilities = recipes.predict_probabilities(model, images, **FP16)
    assert probabilities.dtype == torch.float32 and not probabilities.requires_grad
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(64))


def test_bce_with_logits_keeps_a_confident_wrong_answer_finite_and_right():
    logits, targets = torch.tensor([[20.0]]), torch.tensor([[0.0]])
    with torch.autocast("cpu", dtype=torch.float16):
        good = recipes.binary_loss(logits, targets)
    assert good.dtype == torch.float32 and good.item() == pytest.approx(20.0)
    # The pattern it replaces: sigmoid(20) is exactly 1.0 in fp16, and BCE clamps log(0) to -100.
    naive = F.binary_cross_entropy(torch.sigmoid(logits.half()).float(), targets)
    assert naive.item() == 100.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_autocast_refuses_sigmoid_then_bce():
    logits = torch.randn(4, 1, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(torch.sigmoid(logits @ torch.ones(1, 1, device="cuda")), torch.zeros(4, 1,
                                                                                                  device="cuda"))


def test_unscale_divides_the_norm_clipping_sees_by_the_scale():
    scaled, unscaled, scale = recipes.norms_around_unscale()
    assert scale == 65536.0 and scaled == pytest.approx(unscaled * scale, rel=1e-6)
    # The unscaled norm is the gradients' true size: the same step without a scaler gives it.
    model = tiny_classifier()
    generator = torch.Generator().manual_seed(0)
    images, labels = torch.randn(32, 16, generator=generator), torch.randint(0, 4, (32,), generator=generator)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(images), labels)
    loss.backward()
    assert torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item() == pytest.approx(unscaled, rel=1e-2)


def test_every_recipe_is_listed_with_its_source():
    assert len(RECIPES) == 7
    for title, function in RECIPES:
        assert title and "def " in inspect.getsource(function)
