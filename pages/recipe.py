"""The recipe: the everyday torch.amp patterns beyond the lab's three lines, each one tested on the CPU."""

import inspect

import streamlit as st

from lessons import recipes
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link


@st.cache_data(show_spinner=False)
def unscale_norms() -> tuple[float, float, float]:
    return recipes.norms_around_unscale()


WHY = {
    recipes.step_with_clipping: (
        "Clipping looks at the size of the gradients, and after `scaler.scale(loss).backward()` they are S times "
        "too large. `scaler.unscale_(optimizer)` divides them back first; `scaler.step` then knows not to divide "
        "again, and still skips the step when a gradient is inf or NaN."
    ),
    recipes.step_with_accumulation: (
        "To train with a batch too large for memory, add up the gradients of several micro-batches. Divide each "
        "loss by their count, call `backward()` on each at the same scale, and `step()` and `update()` once: an "
        "`update()` between micro-batches could change the scale halfway through one batch's gradients."
    ),
    recipes.save_checkpoint: (
        "The scaler has state: its current scale and how many good steps it has counted. Save it beside the model "
        "and the optimizer..."
    ),
    recipes.load_checkpoint: (
        "... and load it back, or a resumed fp16 run starts again from 65536: if its scale had fallen below that, it "
        "skips steps while it searches down again; if it had grown above, it climbs back without skips, one doubling "
        "per 2,000 good steps, its small gradients less protected meanwhile."
    ),
    recipes.evaluate: (
        "Autocast speeds evaluation up too. No scaler: nothing is backpropagated, so nothing can "
        "underflow. `inference_mode` drops the autograd graph and its saved activations."
    ),
    recipes.predict_probabilities: (
        "A model's outputs under autocast are 16-bit. Turn them into fp32 before softmax when the probabilities "
        "themselves matter (a threshold, a calibration, a log): fp16 keeps about three decimal digits."
    ),
    recipes.binary_loss: (
        "For yes/no targets, give the logits to `binary_cross_entropy_with_logits` (`nn.BCEWithLogitsLoss`): "
        "autocast runs it in fp32 and it never takes log(0). `sigmoid` then `binary_cross_entropy` rounds "
        "confident probabilities to exactly 0 or 1 in fp16, so a confidently wrong logit of 20 costs a loss of "
        "100 (the clamp) instead of 20. CUDA autocast refuses `binary_cross_entropy` outright: PyTorch's reason is its "
        "backward, which is unsafe in 16 bits."
    ),
}

st.title("The recipe: AMP in your own training code")
amp_step_picture("recipe")
st.markdown(
    """
The lab's three changes (autocast around the forward pass, a GradScaler, `scaler.step` and `scaler.update`) are
the core. Real training code does a few more things, and each has one right way to combine with AMP. Every
function below is the code itself, from `lessons/recipes.py`, and the project's tests run each one on a CPU
(`tests/lessons/test_recipes.py`). `device_type` and `dtype` are arguments: `"cuda"` with `torch.float16` as in the
lab, `"cpu"` with `torch.bfloat16` on a CPU. Make the scaler enabled only for float16, and the same loop serves all:
"""
)
st.code(inspect.getsource(recipes.make_scaler), language="python", wrap_lines=True)

scaled, unscaled, scale = unscale_norms()
if predict_then_check(
    "recipe-unscale", "Gradient clipping compares the gradients' norm with `max_norm`. Right after "
    "`scaler.scale(loss).backward()` with a fresh default GradScaler (fp16), how many times larger is the norm "
    "`clip_grad_norm_` measures than after `scaler.unscale_(optimizer)`?",
    low=1, high=131072, default=1, step=1, fmt="%dx", answer=round(scaled / unscaled), log=True,
    options=[2**n for n in range(0, 18)],
):
    st.caption(
        f"Measured by running the clipping recipe's first lines on a tiny classifier on this server's CPU: "
        f"`clip_grad_norm_` sees {scaled:,.1f} before `unscale_` and {unscaled:.3f} after it; the ratio is the "
        f"scaler's scale, {scale:,.0f}. Clipped at max_norm=1.0 without `unscale_`, this step's gradients would end at "
        f"a norm of 1/{scale:,.0f} once `scaler.step` divides by the scale, instead of {min(unscaled, 1.0):.3f}."
    )

for title, function in recipes.RECIPES:
    st.subheader(title)
    st.markdown(WHY[function])
    st.code(inspect.getsource(function), language="python", wrap_lines=True)

st.subheader("Two things not to do")
st.markdown(
    """
- **Do not call `.half()` on the model** to "use fp16": that is fp16-true training, weights and optimizer in 16
  bits, which loses small updates (an fp32 weight of 1.0 cannot grow by 0.0001 in fp16). AMP keeps the weights in
  fp32 and casts per operation.
- **Do not put `backward()` inside autocast.** The backward pass runs each operation in the dtype its forward
  pass used anyway; only the forward pass and the loss belong in the `with` block.
"""
)

next_link("pages/run_experiment.py", "run a comparison of your own")
