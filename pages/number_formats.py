"""Number formats: how fp32, fp16 and bf16 store a value, their ranges, and where the lab model's numbers fall."""

import streamlit as st

from lessons.capture import capture_values, default_source, summaries
from lessons.number_formats import encode_all, format_table, parse_value
from lessons.underflow import scale_outcome
from trainer.errors import TrainerError
from ui import session
from ui.learn_charts import bits_html, bits_legend_html, format_range_chart

EXAMPLES = "0.1, 1/3, 65504, 70000, 2^-24, 1e-40, -2.5"


@st.cache_data(show_spinner="Training the lab model for a few steps to read its values...", max_entries=4)
def model_values(source: str, data_root: str) -> dict:
    """Magnitude summaries of a fresh capture, and how its gradients would fare in fp16 (small, cacheable)."""
    capture = capture_values(source=source, data_root=data_root)
    gradients = scale_outcome(capture.all_values("gradients"))
    return {"summaries": summaries(capture), "gradients_fp16": gradients.to_dict(), "losses": capture.losses,
            "batch_size": capture.batch_size, "steps": capture.steps}


st.title("Number formats: fp32, fp16 and bf16")
st.markdown(
    """
A floating-point number is stored as three fields: a **sign** bit, an **exponent** that says which power of two
the number lies near, and a **mantissa** (the fraction) that says where between that power of two and the next.
More exponent bits mean a wider *range*; more mantissa bits mean finer *precision*.

| format | sign | exponent | mantissa | what it is good for |
|---|---|---|---|---|
| fp32 | 1 | 8 | 23 | the default: wide range, about 7 significant digits |
| fp16 | 1 | 5 | 10 | fast on Tensor Cores, about 3 digits; *narrow range*: overflows above 65504, tiny values vanish |
| bf16 | 1 | 8 | 7 | fp32's range in 16 bits, only 2-3 digits; no loss scaling needed |
"""
)

st.subheader("Type a value")
text = st.text_input("Value", value="0.1", help=f"A decimal, a fraction or a power of two; try {EXAMPLES}.")
st.caption(f"Try: {EXAMPLES}.")
try:
    value = parse_value(text)
except TrainerError as err:
    st.error(str(err))
    st.stop()

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
    elif layout.kind == "zero" and layout.value != 0:
        error.markdown(":red[**underflow**: too small for this format, stored as zero]")
    else:
        spacing = "" if layout.spacing is None else f"  \nnext value up is `{layout.spacing:.3g}` away"
        error.markdown(f"relative error `{layout.relative_error:.3g}`{spacing}")
st.caption(
    "Each value is rounded to the nearest number the format can hold (ties go to an even mantissa). Subnormal "
    "numbers have an all-zero exponent: they reach below the smallest normal number by giving up mantissa bits."
)

st.subheader("The ranges, side by side")
table = format_table()
st.dataframe(
    [
        {
            "format": r.format,
            "bits (sign/exponent/mantissa)": f"1/{r.exponent_bits}/{r.mantissa_bits}",
            "smallest subnormal": f"{r.smallest_subnormal:.3e}",
            "smallest normal": f"{r.smallest_normal:.3e}",
            "largest": f"{r.largest:.4e}",
            "spacing near 1 (epsilon)": f"{r.epsilon:.3e}",
            "significant decimal digits": r.decimal_digits,
        }
        for r in table
    ],
    hide_index=True,
)
st.caption("The same figures as torch.finfo(dtype) gives for tiny (smallest normal), max and eps; the tests check it.")

settings = session.get_settings()
source = default_source(settings.data_root)
try:
    values = model_values(source, settings.data_root)
except TrainerError as err:
    st.error(f"Could not read the lab model's values: {err}")
    st.stop()

st.altair_chart(format_range_chart(table, values["summaries"]), width="stretch")
st.caption(
    "Black ticks on a format: its smallest subnormal, smallest normal, spacing near 1 (epsilon) and largest value. "
    "On the model's rows: the median magnitude. Hover for the numbers."
)
fp16 = values["gradients_fp16"]
st.markdown(
    f"""
The orange bars are the lab model's own numbers after {values['steps']} fp32 training steps on a batch of
{values['batch_size']} {source} images: the darker part holds the middle 98% of the nonzero magnitudes, the lighter
part runs from the smallest to the largest. Weights and activations sit comfortably inside every format. The
**gradients** are much smaller: in fp16 without scaling, **{fp16['underflow_fraction']:.2%}** of the nonzero
gradient values would become exactly zero, and **{fp16['subnormal_fraction']:.1%}** would survive only as
subnormals with fewer significant bits. bf16 shares fp32's exponent, so its range covers them all, at the cost of
precision. That is why AMP with fp16 needs a loss scaler and AMP with bf16 does not: see
*Underflow and loss scaling*.
"""
)
