"""Autocast layer by layer: the dtype of every layer's input, weight, output and gradients, per precision mode."""

import streamlit as st

from lessons.autocast_trace import MODE_DESCRIPTIONS, trace_all, trace_all_isolated
from trainer.errors import TrainerError
from ui import session
from ui.learn_charts import dtype_grid_chart

COLUMN_NAMES = {
    "layer": "layer",
    "kind": "type",
    "input_dtype": "input",
    "weight_dtype": "weight (stored)",
    "output_dtype": "output",
    "weight_grad_dtype": "weight .grad",
    "output_grad_dtype": "gradient into output",
}


@st.cache_data(show_spinner="Running one forward and backward pass in each mode...", max_entries=4)
def traces_for(device: str) -> list[dict]:
    # A GPU is traced in a short-lived child process, so this long-lived server holds no CUDA context.
    traces = trace_all_isolated(device) if device == "cuda" else trace_all(device)
    return [trace.to_dict() for trace in traces]


st.title("Autocast, layer by layer")
st.markdown(
    """
What does `torch.autocast` actually change? Below, the lab's model runs one forward and one backward pass on a
small batch in each mode, and hooks on every layer read the dtype of what goes in, what is stored, what comes out,
and the gradients of the backward pass.

- **fp32**: everything is float32.
- **AMP (autocast)**: the *stored* weights stay float32, the **master copy** that the optimizer updates.
  Inside the `autocast` block, each convolution and linear layer casts its input and a copy of its weight to the
  low precision and computes there, so their outputs are fp16 or bf16; ReLU and max-pooling simply keep the dtype
  they are given. The loss (`cross_entropy`) is on autocast's list of operations that need fp32, so it comes out
  float32 even though the logits are half precision. In the backward pass each op's gradient follows the dtype of
  its forward, and the gradient that reaches a weight is cast back to float32 to match the master copy.
- **Pure half weights** (`model.half()`, or `.to(torch.bfloat16)`): *not* AMP. Every weight, activation,
  gradient and even the loss is 16-bit, and there is no fp32 master copy. Small updates (learning rate x
  gradient) are lost when added to a 16-bit weight, which is why plain half-precision training needs extra care.
"""
)

devices = ["cpu"]
if session.get_job_manager().device_type == "cuda":
    devices.append("cuda")
device = st.radio("Trace on", devices, horizontal=True,
                  help="fp16 on a CPU is slow, but one batch of 8 images takes well under a second.")
try:
    traces = traces_for(device)
except TrainerError as err:
    st.error(str(err))
    st.stop()

grid_rows = [{"mode": t["mode"], **row} for t in traces for row in t["layers"]]
st.altair_chart(dtype_grid_chart(grid_rows), width="stretch")

st.subheader("Every mode, in detail")
for trace in traces:
    st.markdown(f"**{trace['mode']}**: {MODE_DESCRIPTIONS[trace['mode']]}")
    st.dataframe(
        [{COLUMN_NAMES[key]: value for key, value in row.items()} for row in trace["layers"]],
        hide_index=True,
    )
    st.caption(f"logits: {trace['logits_dtype']} · loss: {trace['loss_dtype']}")

amp_traces = [t for t in traces if t["mode"].startswith("amp-")]
if amp_traces:
    sample = amp_traces[0]
    conv = sample["layers"][0]
    st.info(
        f"Under {sample['mode']} the first convolution stores its weight as {conv['weight_dtype']} but computes "
        f"in {conv['output_dtype']}, and its weight's gradient arrives as {conv['weight_grad_dtype']}; the loss "
        f"is {sample['loss_dtype']}. That is the whole trick of AMP: the expensive arithmetic in 16 bits, the "
        "bookkeeping in 32."
    )
