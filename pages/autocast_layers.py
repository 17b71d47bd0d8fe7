"""Autocast layer by layer: the dtype of every layer's input, weight, output and gradients, per precision mode."""

import streamlit as st

from lessons.autocast_lists import CATEGORIES, FP32, LOW, NO_RULE, WIDEST, classify, classify_isolated, cuda_list

# Short names for the table's last column: at 800 px the whole ones cut the table.
CUDA_RULE_NAMES = {LOW: "16-bit", FP32: "fp32", WIDEST: "widest", NO_RULE: "none"}
from lessons.autocast_trace import MODE_DESCRIPTIONS, sixteen_bit_outputs_reason, trace_all, trace_all_isolated
from trainer.errors import TrainerError
from ui import server_bundle
from ui.learn_charts import dtype_grid_chart
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link

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
    traces = trace_all_isolated(device, env=server_bundle.gpu_child_env()) if device == "cuda" else trace_all(device)
    return [trace.to_dict() for trace in traces]


@st.cache_data(show_spinner="Running each op under autocast...", max_entries=4)
def op_lists_for(device: str) -> list[dict]:
    policies = classify_isolated(device, env=server_bundle.gpu_child_env()) if device == "cuda" else classify(device)
    return [policy.to_dict() for policy in policies]


st.title("Autocast, layer by layer")
amp_step_picture("autocast_layers")
st.markdown(
    """
What does `torch.autocast` change? Below, the lab's model runs one forward and one backward pass on a small batch
in each mode, and hooks on every layer read the dtypes going in, stored, coming out and flowing back.

- **AMP (autocast)**: the *stored* weights stay float32, the **master copy** that the optimizer updates. Each
  convolution and linear layer computes on 16-bit copies, so its output is fp16 or bf16; ReLU and max-pooling keep
  the dtype they are given; the loss comes out float32. Each op's backward follows the dtype of its forward, and
  the gradient that reaches a weight is cast back to float32.
- **Pure half weights** (`model.half()`, or `.to(torch.bfloat16)`): *not* AMP. Everything is 16-bit, with no fp32
  master copy, so small updates (learning rate x gradient) are lost when added to a 16-bit weight.
"""
)
with st.expander("Deeper: the other modes, and why the loss is float32"):
    st.markdown(
        """
- **fp32**: everything is float32.
- **AMP (autocast)**: inside the `autocast` block, each convolution and linear layer casts its input and a copy of
  its weight to the low precision and computes there. The loss (`cross_entropy`) runs in fp32 under autocast on
  both CPU and GPU, so it comes out float32 even though the logits are half precision (the measured op lists are
  below).
- **Pure half weights**: even the loss is 16-bit, which is why plain half-precision training needs extra care.
"""
    )

devices = ["cpu"]
if server_bundle.job_manager().device_type == "cuda":
    devices.append("cuda")
device = st.radio("Trace on", devices, horizontal=True,
                  help="fp16 is slow on most CPUs, but one batch of 8 images takes well under a second.")
if device == "cuda" and not server_bundle.gpu_is_idle():
    # The trace is a short GPU process outside the queue: it waits for a moment when no job trains, so that it
    # cannot take GPU memory or time from a learner's measured run.
    st.info("A learner's job is training on the GPU right now; the GPU trace runs once no job is training (it is "
            "then kept for everyone). Here is the CPU trace meanwhile.")
    device = "cpu"
try:
    traces = traces_for(device)
except TrainerError as err:
    st.error(str(err))
    st.stop()

amp_trace = next((t for t in traces if t["mode"].startswith("amp-")), None)
revealed = True
if amp_trace is not None:
    layers = amp_trace["layers"]
    revealed = predict_then_check(
        "autocast-layers", f"Under {amp_trace['mode']}, how many of the model's {len(layers)} layers output 16-bit "
        "values (convolutions, ReLUs, max-pools, linear layers)?", low=0, high=len(layers), default=4, step=1,
        fmt="%d", answer=sum(row["output_dtype"] in ("float16", "bfloat16") for row in layers),
        why=sixteen_bit_outputs_reason(layers),
    )
if revealed:
    grid_rows = [{"mode": t["mode"], **row} for t in traces for row in t["layers"]]
    st.altair_chart(dtype_grid_chart(grid_rows), width="stretch")

    with st.expander("Deeper: every mode, layer by layer"):
        for trace in traces:
            st.markdown(f"**{trace['mode']}**: {MODE_DESCRIPTIONS[trace['mode']]}")
            st.dataframe(
                [{COLUMN_NAMES[key]: value for key, value in row.items()} for row in trace["layers"]],
                hide_index=True,
            )
            st.caption(f"logits: {trace['logits_dtype']} · loss: {trace['loss_dtype']}")

with st.expander("Deeper: autocast's op lists, measured"):
    try:
        policies = op_lists_for(device)
    except TrainerError as err:
        st.error(str(err))
    else:
        low = policies[0]["autocast_dtype"]
        st.markdown(
            f"""
Which list is an op on? Each op below ran under `torch.autocast("{device}", dtype=torch.{low})` twice: once on
fp32 inputs, once on {low} inputs. An op whose fp32 inputs come out {low} is on the **low precision** list; one
whose {low} inputs come out float32 is on the **fp32** list; one that returns what it was given **follows its
input**. These lists belong to the device and the torch version: this is {device} with this server's PyTorch
(PyTorch AMP docs, "Autocast Op Reference", has both lists)."""
        )
        rows = []
        for p in sorted(policies, key=lambda p: CATEGORIES.index(p["category"])):
            row = {"op": p["op"], "kind": p["kind"], f"on {device}": p["category"],
                   "fp32 inputs give": p["from_fp32"], f"{low} inputs give": p["from_low"]}
            if device == "cpu":
                row["CUDA rule"] = CUDA_RULE_NAMES[cuda_list(p["op"], p["category"])]
            rows.append(row)
        st.table(rows, hide_index=True)  # wraps at 800 px, where a grid hid its last columns
        if device == "cpu":
            st.caption(
                "The last column is read from this torch's dispatcher, which needs no GPU (which of CUDA's lists a "
                "rule belongs to beyond the 16-bit one, from the docs' promote list). On CUDA the rules cast the "
                "matrix products to fp16, most other ops (softmax, exp, log, sum, the norms, the losses) to fp32, and "
                "run a few with mixed inputs (addcmul) in the widest of them: on a CPU most of those ops run in bf16 "
                "once their input is bf16. cross_entropy has no CUDA rule of its own, yet comes out fp32 there, "
                "because it is built from log_softmax and nll_loss, which do."
            )

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

next_link("pages/number_formats.py", "number formats, from fp32 to fp8")
