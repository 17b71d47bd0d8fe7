"""Overview: what AMP is, a quick demo to start before reading, the core path through the lab and its deep dives,
and what this server's hardware promises."""

import streamlit as st

from lessons.step_budget import tensor_cores_sentence
from ui import jobs, server_bundle
from ui.predict import predict_then_check
from ui.reference import quick_demo_answer, this_machine_class
from ui.widgets import RESULTS_PAGE, RUN_PAGE, amp_step_picture, hardware_panel, next_link

DEMO_KEY = "overview_demo_job"  # the quick demo this session queued from here

st.title("AMP Lab: faster training with mixed precision")
amp_step_picture("overview")

st.markdown(
    """
A normal PyTorch training run keeps every number in **fp32**, 32-bit floating point. **Automatic mixed precision
(AMP)** runs the big matrix products of convolutions and linear layers in **fp16** or **bf16** instead: 16-bit
inputs, with the products added up in fp32. The weights, their gradients and the optimizer's update stay in fp32.
With fp16, a **GradScaler** multiplies the loss before the backward pass so that small gradients do not round to
zero. That is three small changes to a training script. The lab reports 75 s -> 48 s on its GPU, 1.56x as fast (36%
less time); what you get depends on the device.
"""
)
with st.expander("Deeper: where the time and the memory come from"):
    st.markdown(
        tensor_cores_sentence() + """ AMX units on recent Intel CPUs run bf16 products in hardware too, and every
16-bit tensor moves half the bytes through memory. Inside an `autocast` block, PyTorch runs each operation in the
precision its device's list gives it: matrix products in fp16 or bf16; losses and, on a GPU, softmax, exp, log,
sums and normalisations in fp32 (on a CPU far fewer ops go to fp32: *Adding AMP* shows the measured lists). The
time AMP can save comes from two places: the matrix products run at the 16-bit rate, and the memory-bound
operations (the activations written and read by ReLU, pooling and the rest, most of this CNN's GPU kernels) move
roughly half the bytes (max-pooling's int64 indices stay as large). The memory it saves is the activations kept
for the backward pass. *When AMP pays off* counts how much of the lab's step those two are.
"""
    )

st.subheader("Start a run, then read while it trains")
report = server_bundle.hardware()
demo = server_bundle.offer().quick_demo()
demo_run = demo.runs[0]
st.markdown(
    f"The quick demo compares fp32 with AMP on a small job: {demo_run.subset:,} synthetic images, "
    f"{demo_run.epochs} epoch, batch {demo_run.batch_size}, data held on the device. Start it now: while it waits "
    "and trains, the sidebar shows how it goes on every page."
)
# The quick demo as recorded on this kind of device (reference/), so that a guess can be checked before any run.
demo_answer = quick_demo_answer()
demo_mode = demo_answer.candidate.precision if demo_answer else "AMP"
if predict_then_check(
    "quick-demo-speedup", f"In the quick demo on {this_machine_class()} (like this server), how many times "
    f"as fast as fp32 will {demo_mode} train (1.00x: as fast; below 1: slower)?",
    low=0.0, high=4.0, default=1.5, step=0.05, fmt="%.2fx", log=True,
    answer=demo_answer.speedup if demo_answer else None,
    answered_by=demo_answer.answered_by if demo_answer else None,
    pending=f"No quick demo has been recorded on {this_machine_class()} yet: run yours below, and it answers "
    "this once it has finished.",
) and demo_answer is not None:
    st.caption(demo_answer.provenance)
jobs.queue_or_follow(DEMO_KEY, "Run the quick demo", demo, keep_button=True, primary=True,
                     draw=lambda job: st.success("Your quick demo is queued. Read on: the sidebar follows it, and the "
                                                 "Run page shows it live."))

st.subheader("The core path, and the deep dives")
st.markdown(
    "**The core path** is the shortest way through the lab: Overview, Adding AMP, Run the experiment, Results, When "
    "AMP pays off. The other pages are **deep dives**: read them while your runs train, or after class. On most pages "
    "you predict a number before the measurement shows it."
)
core = st.columns(4)
core[0].page_link("pages/adding_amp.py", label="Adding AMP", icon="1️⃣")
core[1].page_link(RUN_PAGE, label="Run the experiment", icon="2️⃣")
core[2].page_link(RESULTS_PAGE, label="Results", icon="3️⃣")
core[3].page_link("pages/when_amp_pays.py", label="When AMP pays off", icon="4️⃣")
with st.expander("Deeper: what every page does, in the navigation's order"):
    st.markdown(
        """
1. **The fp32 baseline** (deep dive): the lab's script, a small CNN trained on CIFAR-10 in plain fp32, and why
   "fp32" may already be TF32 on a newer GPU.
2. **Adding AMP** (core): the three lines that turn it into mixed-precision training, and why each is there.
3. **Autocast layer by layer, Number formats, Underflow in fp16, The scaler at work** (deep dives): which layers
   autocast runs in low precision, the formats from fp32 to fp8, gradients that underflow in fp16, and the loss
   scaler at work.
4. **Where the memory goes** (deep dive): what one training step holds, fp32 beside AMP, and what AMP shrinks.
5. **Run the experiment** (core): train fp32 and AMP on this server, one after the other, and watch them live.
   **AMP without its safeguards** (deep dive) runs amp-fp16 without its GradScaler or its fp32 weights.
6. **Results** and **When AMP pays off** (core): time, memory, throughput, loss and accuracy beside the lab's own
   figures, and why your speedup is what it is. **History** (deep dive) puts any two runs side by side.
7. **The AMP recipe** (deep dive): the patterns your own training code needs beyond the lab's three lines.
"""
    )

st.subheader("This server")
unseen_gpu = server_bundle.unseen_gpu()
if unseen_gpu:
    st.warning(unseen_gpu)
hardware_panel(report)

next_link("pages/fp32_baseline.py", "the fp32 baseline")
