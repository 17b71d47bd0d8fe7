"""Number formats: the precision ladder from fp32 to fp8, how each stores a value, and where the lab model's numbers
fall."""

import streamlit as st

from lessons.capture import capture_values, summaries
from lessons.number_formats import TORCH_VERSION, encode_all, exact, format_table, parse_value
from lessons.underflow import FP16_SMALLEST_SUBNORMAL, scale_outcome
from trainer.errors import TrainerError
from ui.lab_capture import read_lab_model
from ui.learn_charts import bits_html, bits_legend_html, format_range_chart
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link

EXAMPLES = "0.1, 1/3, 65504, 65520, 500, 2^-24, 1e-40, -2.5"
# Shares spanning five decades, in percent: a guess is scored on a log scale (ui/predict.closeness).
SHARE_OPTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)


@st.cache_data(show_spinner="Training the lab model for a few steps to read its values...", max_entries=4)
def model_values(source: str, data_root: str) -> dict:
    """Magnitude summaries of a fresh capture, and how its gradients would fare in fp16 (small, cacheable)."""
    capture = capture_values(source=source, data_root=data_root)
    gradients = scale_outcome(capture.all_values("gradients"))
    return {"summaries": summaries(capture), "gradients_fp16": gradients.to_dict(), "losses": capture.losses,
            "batch_size": capture.batch_size, "steps": capture.steps}


st.title("Number formats: from fp32 to fp8")
amp_step_picture("number_formats")
st.markdown(
    """
A floating-point number is stored as three fields: a **sign** bit, an **exponent** that says which power of two
the number lies near, and a **mantissa** (the fraction) that says where between that power of two and the next.
More exponent bits mean a wider *range*; more mantissa bits mean finer *precision*. Mixed precision walks down a
ladder of such formats: **fp32** (the default), **TF32** (what Ampere-or-newer Tensor Cores make of fp32 inputs),
**bf16** and **fp16** (what autocast uses) and the two **fp8** formats of the newest GPUs.
"""
)
table = format_table()
fp16_range = next(r for r in table if r.format == "fp16")
# One column per format and a row per property, the fp8 formats in a table of their own: each fits a narrow window
# (800 px) instead of hiding its last columns, and a learner compares the formats along a row.
OVERFLOW_WORDS = {"inf": "to inf", "nan": "to NaN", "largest": "clamped"}
properties = {
    "bits (sign/exponent/mantissa)": lambda r: f"1/{r.exponent_bits}/{r.mantissa_bits}",
    "smallest subnormal": lambda r: f"{r.smallest_subnormal:.3e}",
    "smallest normal": lambda r: f"{r.smallest_normal:.3e}",
    "largest": lambda r: exact(r.largest),
    "overflows": lambda r: (f"{'from' if r.overflow_at_midpoint else 'past'} {exact(r.overflow_from)} "
                            f"({OVERFLOW_WORDS[r.on_overflow]})"),
    "spacing near 1 (epsilon)": lambda r: f"{r.epsilon:.3e}",
    "significant decimal digits": lambda r: str(r.decimal_digits),
    "where you meet it": lambda r: r.use,
}
for group in ([r for r in table if not r.format.startswith("fp8")], [r for r in table if r.format.startswith("fp8")]):
    st.table([{"": name, **{r.format: shown(r) for r in group}} for name, shown in properties.items()],
             hide_index=True)
e4m3 = next(r for r in table if r.format.endswith("e4m3"))
with st.expander("Deeper: where the table's numbers come from, and when a value overflows"):
    st.markdown(
        "Read from torch.finfo of torch's own dtypes (float32, bfloat16, float16, float8_e4m3fn, float8_e5m2); torch "
        "has no TF32 dtype, so its row follows from its layout (fp32's 8 exponent bits, fp16's 10 mantissa bits). A "
        "value overflows once it is past the midpoint between the largest number and the next step, or at it where "
        f"that tie rounds up: fp16 stores 65519 as {fp16_range.largest:.0f} and turns {fp16_range.overflow_from:.0f} "
        f"into inf, while e4m3 still stores {exact(e4m3.overflow_from)} as {exact(e4m3.largest)}. The fp8 rows follow "
        'Micikevicius et al., "FP8 Formats for Deep Learning" (2022): e4m3 has no infinity, so what a cast stores '
        f"past its range is torch's choice. This torch ({TORCH_VERSION}) "
        + (f"saturates it at {exact(e4m3.largest)}, even from inf; torch 2.11 gave NaN instead, as the OCP "
           "standard's non-saturating mode does." if e4m3.on_overflow == "largest" else
           "makes it NaN, as the OCP standard's non-saturating mode does; torch 2.14.1 saturates it at "
           f"{exact(e4m3.largest)} instead." if e4m3.on_overflow == "nan" else f"stores {e4m3.on_overflow}.")
    )

st.subheader("Type a value")
text = st.text_input("Value", value="0.1", help=f"A decimal, a fraction or a power of two; try {EXAMPLES}.")
st.caption(f"Try: {EXAMPLES}.")
try:
    value = parse_value(text)
except TrainerError as err:
    st.error(str(err))
    value = None

if value is not None:
    st.markdown(bits_legend_html(), unsafe_allow_html=True)
    for layout in encode_all(value):
        name, bits, stored, error = st.columns([1, 4, 3, 3])
        name.markdown(f"**{layout.format}**")
        bits.markdown(bits_html(layout), unsafe_allow_html=True)
        stored.markdown(f"stores `{layout.stored!r}`  \n*{layout.kind}*")
        if layout.relative_error is None:
            error.markdown("relative error: undefined for NaN")
        elif layout.kind == "inf" and layout.value != layout.stored:
            error.markdown(":red[**overflow**: too large for this format, stored as infinity]")
        elif layout.saturated:
            error.markdown(":red[**saturated**: too large for this format, clamped to its largest value]")
        elif layout.kind == "zero" and layout.value != 0:
            error.markdown(":red[**underflow**: too small for this format, stored as zero]")
        else:
            spacing = "" if layout.spacing is None else f"  \nnext value up is `{layout.spacing:.3g}` away"
            error.markdown(f"relative error `{layout.relative_error:.3g}`{spacing}")
    with st.expander("Deeper: how a value is rounded, and what a subnormal is"):
        st.markdown(
            "Each value is rounded to the nearest number the format can hold (ties go to an even mantissa), so a "
            "value at or below half the smallest subnormal becomes zero. Subnormal numbers have an all-zero "
            "exponent: they reach below the smallest normal number by giving up mantissa bits. The TF32 row rounds "
            "the fp32 value to nearest-even at 10 mantissa bits; how a GPU library rounds fp32 inputs to TF32 is its "
            "own choice."
        )

with st.expander("Deeper: fp8, honestly"):
    st.markdown(
        """
fp8 training is not autocast with a smaller dtype. It runs only the **Linear** layers' matrix products in fp8, each
tensor (or each block of one) with its own scale factor, on GPUs with fp8 Tensor Cores (Ada, Hopper and newer),
through libraries such as NVIDIA Transformer Engine or torchao. There is more than one recipe: Transformer Engine's
"hybrid" one uses e4m3 for weights and activations and e5m2 for gradients, others use e4m3 throughout with finer
(per-block) scales (Transformer Engine's documentation, "Using FP8"). It pays off for large matrices, where the products dominate the step; for this lab's small CNN, whose
time goes to convolutions, memory traffic and the data pipeline, it would not.
"""
    )

values, source = read_lab_model(model_values, "values")

if values is not None:
    st.subheader("The ranges, side by side")
    st.altair_chart(format_range_chart(table, values["summaries"]), width="stretch")
    st.caption(
        "Black ticks on a format: its smallest subnormal, smallest normal, spacing near 1 (epsilon) and largest "
        "value. On the model's rows: the median magnitude. Hover for the numbers."
    )
    fp16 = values["gradients_fp16"]
    if predict_then_check(
        "zero-gradients", "Without loss scaling, what share of the lab model's nonzero gradients become exactly "
        "zero in fp16?", low=0.001, high=50.0, default=1.0, step=0.0, fmt="%.3g%%",
        answer=100 * fp16["underflow_fraction"], log=True, options=SHARE_OPTIONS,
        why=f"fp16 rounds a magnitude below half its smallest subnormal, 2^-25 = {FP16_SMALLEST_SUBNORMAL / 2:.2g}, "
        "to zero; a share of a trained model's gradients is that small, because each is a sum of products of small "
        "activations and small upstream gradients. The histogram below shows where they lie.",
    ):
        st.markdown(
            f"""
    The orange bars are the lab model's own numbers after {values['steps']} fp32 training steps on a batch of
    {values['batch_size']} {source} images: the darker part holds the middle 98% of the nonzero magnitudes, the lighter
    part runs from the smallest to the largest. Weights and activations sit comfortably inside fp16's and bf16's
    ranges. The **gradients** are much smaller: in fp16 without scaling, **{fp16['underflow_fraction']:.2%}** of the
    nonzero gradient values would become exactly zero, and **{fp16['subnormal_fraction']:.1%}** would survive only as
    subnormals with fewer significant bits. So for this model few gradients vanish, but many lose precision; a model
    with smaller gradients loses more. bf16 shares fp32's exponent, so its range covers them all, at the cost of
    precision everywhere. That is why AMP with fp16 uses a loss scaler and AMP with bf16 does not: see the next two
    pages.
    """
        )

next_link("pages/underflow.py", "underflow in fp16")
