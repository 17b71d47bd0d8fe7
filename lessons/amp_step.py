"""One AMP training step, in the order its parts run, and which parts each page of the walkthrough is about. The
picture (ui/learn_charts.amp_step_chart) is drawn from this list once and shown on every Learn page with that
page's parts highlighted.

The order is PyTorch's with `torch.autocast` and `torch.amp.GradScaler` (its AMP recipe): autocast casts each fp32
weight to 16 bits once per autocast region and caches the copy; the ops on autocast's lower-precision list
(convolutions, linear layers) run in 16 bits; the loss is computed in fp32; the scaler multiplies it before
backward; each op's backward runs in the dtype of its forward; the gradients land on the fp32 weights;
`scaler.step` unscales them and skips the step if any is inf or NaN; `scaler.update` then halves the scale after a
skip or doubles it after enough good steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepPart:
    key: str
    label: str  # short enough for a box: "\n" breaks it
    what: str  # one sentence, for the caption and the tooltip


STEP_PARTS = (
    StepPart("master", "fp32 master\nweights", "The weights stay in fp32; the optimizer updates them there."),
    StepPart("cast", "cached 16-bit\ncopies", "Autocast casts each weight to 16 bits once per autocast region and "
                                              "reuses the copy."),
    StepPart("matmuls", "16-bit conv\nand linear", "Convolutions and linear layers run in fp16 or bf16, on Tensor "
                                                   "Cores where the GPU has them."),
    StepPart("loss", "fp32 loss", "The loss (and other ops on autocast's fp32 list) is computed in fp32."),
    StepPart("scale", "loss × scale", "fp16 only: the GradScaler multiplies the loss, so small gradients stay "
                                      "above fp16's smallest number."),
    StepPart("backward", "backward in\nforward dtype", "Each op's backward runs in the dtype its forward ran in."),
    StepPart("grads", "fp32\ngradients", "The gradients are accumulated on the fp32 weights."),
    StepPart("unscale", "unscale,\ninf check", "scaler.step divides the gradients by the scale and looks for inf "
                                               "or NaN."),
    StepPart("step", "step or\nskip", "If every gradient is finite the optimizer steps; else the step is skipped."),
    StepPart("update", "update the\nscale", "scaler.update halves the scale after a skip, doubles it after 2,000 "
                                            "good steps in a row."),
)
PART_KEYS = tuple(part.key for part in STEP_PARTS)

# Which parts each page is about (by the page's file name in pages/).
PAGE_PARTS = {
    "overview": PART_KEYS,
    "fp32_baseline": ("master", "loss", "grads", "step"),
    "adding_amp": ("cast", "matmuls", "scale", "unscale", "update"),
    "autocast_layers": ("cast", "matmuls", "loss", "backward"),
    "number_formats": ("matmuls", "backward", "grads"),
    "underflow": ("matmuls", "scale", "backward"),
    "loss_scaling": ("scale", "unscale", "step", "update"),
    "memory": ("master", "cast", "matmuls", "grads"),
    "safeguards": ("master", "scale", "unscale"),
    "when_amp_pays": ("matmuls",),
    "recipe": PART_KEYS,
}


def parts_for(page: str) -> tuple[StepPart, ...]:
    """The parts `page` highlights, in step order (ValueError for a page this map does not know)."""
    if page not in PAGE_PARTS:
        raise ValueError(f"no AMP-step parts for the page {page!r}: add it to PAGE_PARTS")
    keys = PAGE_PARTS[page]
    return tuple(part for part in STEP_PARTS if part.key in keys)


def highlight_sentence(page: str) -> str:
    """The caption under the picture: which parts this page is about, in words."""
    parts = parts_for(page)
    if len(parts) == len(STEP_PARTS):
        return "One AMP training step, in the order its parts run: every part of it is on this page."
    names = ", ".join(part.label.replace("\n", " ") for part in parts)
    return f"One AMP training step, in the order its parts run. This page is about the highlighted parts: {names}."
