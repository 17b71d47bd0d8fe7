"""Adding AMP: autocast and GradScaler explained, the diff between the two lab scripts, and the old spelling."""

import streamlit as st

from ui.lab_code import (
    AMP_SCRIPT,
    BASELINE_SCRIPT,
    CURRENT_SPELLING,
    DEPRECATED_SPELLING,
    changed_lines,
    deprecation_warnings,
    read_script,
    script_diff,
)


@st.cache_data(show_spinner="Running the old spelling in a fresh Python to catch its warning...")
def old_spelling_warnings() -> list[str]:
    return deprecation_warnings()


st.title("Adding AMP")
st.markdown(
    """
Turning the baseline into mixed-precision training takes two tools from `torch.amp`: **autocast**, which
picks a number format per operation, and **GradScaler**, which protects fp16 gradients.
"""
)

st.subheader("Autocast: the right precision for each operation")
st.markdown(
    """
Inside `with torch.autocast(device_type, dtype=...)`, PyTorch looks up each operation in a list:

- **Runs in the low precision (fp16 or bf16):** convolutions, linear layers, matrix multiplications. These
  are the operations Tensor Cores (and, on CPUs, AMX units) speed up, and they tolerate rounding well
  because each output sums many products.
- **Stays in fp32:** operations that need a wide range or many accurate digits: softmax, log, exp,
  cross-entropy and other losses, sums over many values, layer and group normalisation.
- **Follows its inputs:** cheap element-wise operations such as ReLU and max-pooling run in whatever
  precision their input already has.

Autocast changes the operations, not the model: the weights stay fp32 (autocast makes low-precision copies
for each product), and the optimizer updates the fp32 weights. Only the forward pass and the loss go inside
the block; `backward()` runs outside, and each operation's backward uses the precision its forward used.
The *Autocast layer by layer* page shows the dtype of every layer of this model.
"""
)

st.subheader("GradScaler: keeping small gradients alive in fp16")
st.markdown(
    """
fp16 has only 5 exponent bits: the smallest number it can hold is about 6 x 10⁻⁸ (and below 6 x 10⁻⁵ it
already loses digits). Many gradients are smaller than that, so in fp16 they **underflow**: they become
exactly zero, and the weights they belong to stop learning.

Loss scaling fixes this with arithmetic: multiply the loss by a large factor *S* (65,536 to start) before
`backward()`. By the chain rule every gradient is multiplied by *S* too, which lifts the small ones into fp16's
range. Before the weights change, the gradients are divided by *S* again, in fp32. `GradScaler` does all of it:

- `scaler.scale(loss).backward()`: backward on the scaled loss;
- `scaler.step(optimizer)`: unscale the gradients; if any is inf or NaN (the scale was too big), **skip** this
  step instead of corrupting the weights;
- `scaler.update()`: halve the scale after a skipped step, and double it after 2,000 good steps in a row.
"""
)

st.subheader("Why bf16 needs no scaler")
st.markdown(
    """
bf16 keeps fp32's 8 exponent bits and gives up mantissa bits instead. It covers the same range as fp32 (down to
about 10⁻³⁸), so gradients do not underflow and no loss scaling is needed: with `dtype=torch.bfloat16`, leave the
scaler out (or create it with `enabled=False`, which turns its three calls into plain `backward()`, `step()`
and nothing). The price is precision: 8 significant bits (2 to 3 decimal digits) against fp16's 11 bits (3
to 4 digits), which training tolerates well. bf16 needs hardware support: NVIDIA GPUs from Ampere on, and
recent CPUs (AVX-512 bf16, AMX).
"""
)

st.subheader("The changes, line by line")
removed, added = changed_lines()
st.markdown(
    f"`lab/{AMP_SCRIPT}` is `lab/{BASELINE_SCRIPT}` with {removed} lines changed and {added} lines in their place "
    "(the docstring and the messages included). The three changes marked *AMP change* are the whole technique; "
    "the script also picks bf16 on a CPU, where fp16 has no fast kernels."
)
unified, side_by_side = st.tabs(["Unified diff", "Side by side"])
with unified:
    st.code(script_diff(), language="diff")
with side_by_side:
    left, right = st.columns(2)
    with left:
        st.caption(f"lab/{BASELINE_SCRIPT}")
        st.code(read_script(BASELINE_SCRIPT), language="python", line_numbers=True)
    with right:
        st.caption(f"lab/{AMP_SCRIPT}")
        st.code(read_script(AMP_SCRIPT), language="python", line_numbers=True)

st.subheader("Old spelling, new spelling")
st.markdown(
    """
The lab was written with the CUDA-only names `torch.cuda.amp.autocast()` and `torch.cuda.amp.GradScaler()`.
They still work, but they are deprecated: today you name the device as an argument, and the same code then
runs on a CPU too. (`torch.autocast` and `torch.amp.autocast` are two names for the same thing.)
"""
)
old, new = st.columns(2)
with old:
    st.caption("Deprecated (the lab's spelling)")
    st.code(DEPRECATED_SPELLING, language="python")
with new:
    st.caption("Current (this project's scripts)")
    st.code(CURRENT_SPELLING, language="python")
st.markdown("This is what the old spelling prints with this server's PyTorch (captured live, once):")
warnings = old_spelling_warnings()
if warnings:
    st.code("\n".join(warnings), language="text")
else:
    st.caption("This PyTorch printed no FutureWarning for the old spelling.")
st.page_link("pages/run_experiment.py", label="Try it: run the experiment", icon="🧪")
