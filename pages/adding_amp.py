"""Adding AMP: autocast and GradScaler explained, the diff between the two lab scripts, and the old spelling."""

import streamlit as st

from lessons.autocast_lists import FOLLOWS, FP32, LOW, WIDEST, classify, cuda_rules_for, ops_in
from lessons.underflow import default_init_scale
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
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link


@st.cache_data(show_spinner="Running the old spelling in a fresh Python to catch its warning...")
def old_spelling_warnings() -> list[str]:
    return deprecation_warnings()


@st.cache_data(show_spinner=False)
def cpu_lists() -> dict[str, list[str]]:
    """What CPU autocast does with a set of common ops, measured with this server's torch."""
    policies = classify("cpu")
    return {category: ops_in(policies, category) for category in (LOW, FP32, FOLLOWS)}


def code_list(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) or "none of the probed ops"


st.title("Adding AMP")
amp_step_picture("adding_amp")
st.markdown(
    """
Turning the baseline into mixed-precision training takes two tools from `torch.amp`: **autocast**, which
picks a number format per operation, and **GradScaler**, which protects fp16 gradients.
"""
)

st.subheader("Autocast: the right precision for each operation")
lists = cpu_lists()
cuda_rules = cuda_rules_for(lists[FOLLOWS])
st.markdown(
    """
Inside `with torch.autocast(device_type, dtype=...)`, PyTorch looks each operation up in a list, and **the lists
differ per device** (PyTorch AMP docs, "Autocast Op Reference"). Convolutions, linear layers and matrix
multiplications run in fp16 or bf16 on every device; on a CUDA GPU a long list (softmax, log, exp, sums, the norms,
the losses) runs in fp32, on a CPU a short one. Everything else follows its input.

The weights stay fp32 (autocast casts each to a 16-bit copy once per `autocast` block), and the optimizer updates
them outside the block. Only the forward pass and the loss go inside; each operation's backward, run outside, uses
the precision its forward used.
"""
)
with st.expander("Deeper: the three lists, CPU beside CUDA, measured with this server's torch"):
    st.markdown(
        f"""
- **Runs in the low precision (fp16 or bf16), on every device:** convolutions, linear layers, matrix
  multiplications. These are what Tensor Cores on NVIDIA GPUs (and AMX units on recent Intel CPUs) speed up.
  They tolerate 16 bits because the hardware takes 16-bit *inputs* but adds up the products in an fp32
  accumulator; it is long sums *stored* in 16 bits that lose digits (Micikevicius et al. 2018, section 3.3).
- **Runs in fp32:** on a CUDA GPU, a long list: softmax, log, exp, sums, layer and group norm, the losses and
  more. PyTorch's 16-bit reductions already accumulate in fp32 inside; the list keeps their *results* in fp32,
  whose range a sum of many values can need (fp16 overflows at 65520). On a CPU, a short one: measured with this
  server's torch, CPU autocast sends only {code_list(lists[FP32])} of the probed ops to fp32.
- **Follows its input:** everything on neither list runs in whatever dtype it is given. On a CPU that includes
  {code_list(lists[FOLLOWS])}: after a bf16 layer they run in bf16. CUDA's autocast has its own rule for some of
  these (read from this torch's dispatcher): the docs put {code_list(cuda_rules[FP32])} on its fp32 list, and
  {code_list(cuda_rules[WIDEST])} on its promote list (mixed inputs run in the widest of their dtypes).

The next page, *Autocast layer by layer*, shows the dtype of every layer of this model and the full measured lists.
"""
    )

st.subheader("GradScaler: keeping small gradients alive in fp16")
st.markdown(
    """
fp16 has only 5 exponent bits: its smallest number is 2⁻²⁴ (about 6 x 10⁻⁸), and a gradient at or below half of
that **underflows** to zero and teaches its weight nothing. Loss scaling multiplies the loss by a
large factor *S* (65,536 to start) before `backward()`; by the chain rule every gradient is multiplied by *S* too,
which lifts the small ones into fp16's range. `GradScaler` does it in three calls:

- `scaler.scale(loss).backward()`: backward on the scaled loss;
- `scaler.step(optimizer)`: divide the gradients by *S*, in fp32; if any is inf or NaN (the scale was too big),
  **skip** this step instead of corrupting the weights;
- `scaler.update()`: halve *S* after a skipped step, double it after 2,000 good steps in a row.
"""
)
with st.expander("Deeper: subnormals, and the scaler's factors"):
    st.markdown(
        """
Below 2⁻¹⁴ (about 6 x 10⁻⁵) fp16 already loses digits: such numbers are subnormal, with fewer significant bits.
How many gradients vanish or lose bits depends on the model: for this lab's CNN the *Underflow in fp16* page
measures few that vanish and many that survive only with fewer bits. `scaler.update()` multiplies the scale by
the backoff factor (0.5 by default, so it halves) after a skipped step, and by the growth factor (2 by default, so
it doubles) after 2,000 good steps in a row; *The scaler at work* shows it in real runs.
"""
    )

st.subheader("Why bf16 needs no scaler")
st.markdown(
    """
bf16 keeps fp32's 8 exponent bits and gives up mantissa bits instead. It covers the same range as fp32 (down to
about 10⁻³⁸), so gradients do not underflow and no loss scaling is needed: with `dtype=torch.bfloat16`, leave the
scaler out, or create it with `enabled=False`. The price is precision: 8 significant bits (2 to 3 decimal digits)
against fp16's 11 bits (3 to 4 digits), which training tolerates well.
"""
)
with st.expander("Deeper: a disabled scaler, and where bf16 is fast"):
    st.markdown(
        """
A GradScaler created with `enabled=False` turns its three calls into plain `backward()`, `step()` and nothing, so
one training loop serves fp32, bf16 and fp16. bf16 is fast where the hardware has it: NVIDIA GPUs from Ampere on,
and CPUs with AVX-512 bf16 or AMX.
"""
    )

st.subheader("The changes, line by line")
removed, added = changed_lines()
init_scale = default_init_scale()
predict_then_check(
    "init-scale", "`scaler.scale(loss)` multiplies the loss before the backward pass. By how much, with a fresh "
    "`torch.amp.GradScaler()` and its default settings?", low=1, high=2**24, default=2.0**8, step=1, fmt="%.0fx",
    answer=init_scale, log=True, options=[2.0**n for n in range(0, 25, 2)],
    why=f"GradScaler starts at init_scale={init_scale:,.0f}, read from this torch's own signature: high on purpose, "
    "since a scale too high shows at once as inf in the gradients (the step is skipped and the scale halved) while "
    "one too low loses small gradients silently.",
)
st.markdown(
    f"`lab/{AMP_SCRIPT}` is `lab/{BASELINE_SCRIPT}` with {removed} lines changed and {added} lines in their "
    "place (the docstring and the messages included). The three changes marked *AMP change* are the whole "
    "technique; the script also picks bf16 on a CPU: on CPUs without fp16 matrix units (AMX-FP16), fp16 kernels "
    "are slow, even with AVX512-FP16 (the Xeon this project was benchmarked on has AVX512-FP16 but no "
    "AMX-FP16, and amp-fp16 ran about 60x slower than fp32 there)."
)
unified, side_by_side = st.tabs(["Unified diff", "Side by side"])
with unified:
    st.code(script_diff(), language="diff", wrap_lines=True)
with side_by_side:
    left, right = st.columns(2)
    with left:
        st.caption(f"lab/{BASELINE_SCRIPT}")
        st.code(read_script(BASELINE_SCRIPT), language="python", line_numbers=True, wrap_lines=True)
    with right:
        st.caption(f"lab/{AMP_SCRIPT}")
        st.code(read_script(AMP_SCRIPT), language="python", line_numbers=True, wrap_lines=True)

with st.expander("Deeper: old spelling, new spelling"):
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
        st.code(DEPRECATED_SPELLING, language="python", wrap_lines=True)
    with new:
        st.caption("Current (this project's scripts)")
        st.code(CURRENT_SPELLING, language="python", wrap_lines=True)
    st.markdown("This is what the old spelling prints with this server's PyTorch (captured live, once):")
    warnings = old_spelling_warnings()
    if warnings:
        st.code("\n".join(warnings), language="text", wrap_lines=True)
    else:
        st.caption("This PyTorch printed no FutureWarning for the old spelling.")
next_link("pages/autocast_layers.py", "autocast, layer by layer")
