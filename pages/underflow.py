"""Underflow in fp16: the lab model's real gradients against fp16's range, and what a loss scale S does to them."""

import numpy as np
import streamlit as st

from lessons.capture import CAPTURE_STEPS, capture_values
from lessons.underflow import MAX_SCALE_EXPONENT, log2_histogram, safe_scale_exponents, scale_sweep
from ui.lab_capture import read_lab_model
from ui.learn_charts import gradient_histogram_chart, scale_sweep_chart
from ui.widgets import amp_step_picture, next_link

GRADIENT_KINDS = {
    "weight gradients": "gradients",
    "activation gradients": "activation gradients",
}


@st.cache_data(show_spinner="Training the lab model for a few steps to read its gradients...", max_entries=4)
def gradient_views(source: str, data_root: str) -> dict:
    """Per kind of gradient: its log2 histogram, what every scale 2^0..2^24 does to it, and its largest |value|."""
    capture = capture_values(source=source, data_root=data_root)
    views = {}
    for label, kind in GRADIENT_KINDS.items():
        values = capture.all_values(kind)
        views[label] = {
            "bins": log2_histogram(values),
            "sweep": scale_sweep(values),
            "largest": float(np.abs(values).max()),
        }
    return views


def scale_label(exponent: int) -> str:
    return f"2^{exponent} = {2**exponent:,}"


st.title("Underflow in fp16")
amp_step_picture("underflow")
st.markdown(
    """
Gradients are often tiny: each is a sum of many small contributions, divided by the batch size. In fp16 a value
at or below half of 2^-24 (about 6e-8) rounds to **zero**, and one below 2^-14 (about 6e-5) keeps fewer
significant bits (a subnormal). A gradient that becomes zero teaches the model nothing. **Loss scaling** multiplies
the loss by a factor S before the backward pass, so every gradient is S times larger too; it is divided by S again,
in fp32, before the optimizer step. Too large an S pushes the largest gradients to 65520 or more, which rounds to
**inf** (fp16's largest number is 65504; 65519 still rounds down to it).
"""
)

views, source = read_lab_model(gradient_views, "gradients")
if views is None:
    st.stop()

st.subheader("The lab model's gradients against fp16")
which = st.radio("Gradients", list(GRADIENT_KINDS), horizontal=True,
                 help="Weight gradients are what the optimizer uses; activation gradients flow between layers "
                      "during the backward pass, and under AMP they are computed in fp16.")
exponent = st.select_slider("Loss scale S", options=list(range(MAX_SCALE_EXPONENT + 1)), value=0,
                            format_func=scale_label)
view = views[which]
outcome = view["sweep"][exponent]
first, second, third = st.columns(3)
first.metric("become zero in fp16", f"{outcome.underflow_fraction:.3%}", help=f"{outcome.underflow:,} values")
second.metric("only subnormal (fewer bits)", f"{outcome.subnormal_fraction:.2%}", help=f"{outcome.subnormal:,} values")
third.metric("overflow to inf", f"{outcome.overflow_fraction:.3%}", help=f"{outcome.overflow:,} values")
st.altair_chart(gradient_histogram_chart(view["bins"], exponent), width="stretch")
st.altair_chart(scale_sweep_chart(view["sweep"], exponent), width="stretch")
safe = safe_scale_exponents(view["sweep"])
if safe:
    st.markdown(
        f"Of the {outcome.nonzero:,} nonzero {which} from {source} data, the fewest are lost to underflow without "
        f"any overflowing at scales from {scale_label(safe[0])} to {scale_label(safe[-1])}. Multiplying by a power "
        "of two only changes the exponent, so scaling and unscaling add no rounding error of their own."
    )
else:
    st.markdown("Every scale up to 2^24 overflows some of these gradients: the scaler would keep backing off.")
peaks = {label: view["largest"] for label, view in views.items()}
first_to_overflow = max(peaks, key=peaks.get)
st.caption(
    f"In this capture the largest activation gradient is {peaks['activation gradients']:.3g} and the largest "
    f"weight gradient {peaks['weight gradients']:.3g}, so as S grows the {first_to_overflow} overflow first. "
    f"This is step {CAPTURE_STEPS} from fresh weights; later steps, with smaller gradients, lose more."
)

next_link("pages/loss_scaling.py", "the scaler at work")
