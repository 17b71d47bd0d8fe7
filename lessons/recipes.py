"""Everyday torch.amp patterns, each one function: the Recipe page shows its source, tests/lessons/test_recipes.py
runs it on the CPU. `device_type` and `dtype` are arguments so the same code runs on "cuda" with float16 (the lab)
and in the tests on "cpu"; a GradScaler is made enabled only for float16, as in the trainer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def make_scaler(device_type: str, dtype: torch.dtype) -> torch.amp.GradScaler:
    # Only float16 needs loss scaling; for bfloat16 the scaler is a pass-through, so the loop stays the same.
    return torch.amp.GradScaler(device_type, enabled=dtype == torch.float16)


def step_with_clipping(model, optimizer, scaler, images, labels, device_type="cuda", dtype=torch.float16,
                       max_norm=1.0):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = F.cross_entropy(model(images), labels)
    scaler.scale(loss).backward()  # outside autocast: backward runs each op in its forward dtype anyway
    scaler.unscale_(optimizer)  # the .grad tensors are now true size, so max_norm means what it says
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # knows unscale_ already ran; still skips the step if a gradient is inf/NaN
    scaler.update()
    return loss.detach()


def step_with_accumulation(model, optimizer, scaler, micro_batches, device_type="cuda", dtype=torch.float16):
    optimizer.zero_grad(set_to_none=True)
    for images, labels in micro_batches:
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(images), labels) / len(micro_batches)  # the mean over the whole batch
        scaler.scale(loss).backward()  # gradients add up in .grad, all at the same scale
    scaler.step(optimizer)  # once per effective batch: step and update only after the last micro-batch
    scaler.update()


def save_checkpoint(path, model, optimizer, scaler, epoch):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(),  # the current scale and growth tracker: resume where it was
                "epoch": epoch}, path)


def load_checkpoint(path, model, optimizer, scaler):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])  # without it, a resumed run searches down from 65536 again
    return checkpoint["epoch"]


@torch.inference_mode()  # no autograd graph, and no GradScaler: nothing is backpropagated
def evaluate(model, batches, device_type="cuda", dtype=torch.float16):
    model.eval()
    correct = total = 0
    for images, labels in batches:
        with torch.autocast(device_type, dtype=dtype):
            logits = model(images)
        correct += (logits.argmax(dim=1) == labels).sum().item()
        total += labels.numel()
    model.train()
    return correct / total


@torch.inference_mode()
def predict_probabilities(model, images, device_type="cuda", dtype=torch.float16):
    model.eval()
    with torch.autocast(device_type, dtype=dtype):
        logits = model(images)
    return logits.float().softmax(dim=1)  # softmax in fp32: small probabilities keep their digits


def binary_loss(logits, targets):
    # One fused op that autocast runs in fp32, computed from the logits (log-sum-exp, no log(0)).
    # sigmoid() then binary_cross_entropy() rounds a logit of 20 to a probability of exactly 1.0 in fp16,
    # and CUDA autocast refuses binary_cross_entropy outright (PyTorch: its backward is unsafe in 16 bits).
    return F.binary_cross_entropy_with_logits(logits, targets)


RECIPES = (
    ("Clip gradients: unscale_ first", step_with_clipping),
    ("Accumulate gradients over micro-batches", step_with_accumulation),
    ("Save the scaler with the checkpoint", save_checkpoint),
    ("... and load it back", load_checkpoint),
    ("Evaluate under autocast, without a scaler", evaluate),
    ("Inference: probabilities in fp32", predict_probabilities),
    ("Binary targets: BCEWithLogits, not sigmoid + BCE", binary_loss),
)


def norms_around_unscale(device_type: str = "cpu", dtype: torch.dtype = torch.float16, seed: int = 0):
    """What clip_grad_norm_ would measure on one step_with_clipping step of the tiny classifier: the gradients' norm
    right after scaler.scale(loss).backward(), then after scaler.unscale_(optimizer), and the scale between them.
    For the Recipe page's predict-then-check; a fresh default scaler, as a run starts with."""
    model = tiny_classifier(seed=seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = make_scaler(device_type, dtype)
    generator = torch.Generator().manual_seed(seed)
    images, labels = torch.randn(32, 16, generator=generator), torch.randint(0, 4, (32,), generator=generator)
    with torch.autocast(device_type, dtype=dtype):
        loss = F.cross_entropy(model(images), labels)
    scaler.scale(loss).backward()
    scaled = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()  # inf: measure, clip nothing
    scaler.unscale_(optimizer)
    unscaled = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
    return scaled, unscaled, scaler.get_scale()


def tiny_classifier(in_features: int = 16, classes: int = 4, seed: int = 0) -> nn.Module:
    """A model small enough that fp16 autocast is quick even on a CPU without fp16 hardware."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(in_features, 32), nn.ReLU(), nn.Linear(32, classes))
