"""Overview: what AMP is, what the learner will do, what this server's hardware promises, and a quick demo."""

import streamlit as st

from ui import jobs, server_bundle
from ui.predict import predict_then_check
from ui.reference import load_references
from ui.widgets import RUN_PAGE, amp_step_picture, hardware_panel, next_link

st.title("AMP Lab: faster training with mixed precision")
amp_step_picture("overview")

st.markdown(
    """
A normal PyTorch training run keeps every number in **fp32**, 32-bit floating point. A neural network rarely
needs all of that precision: the big matrix products in convolutions and linear layers train just as well from
16-bit *inputs*, as long as the products are added up in fp32, which is what the hardware does. NVIDIA's Tensor
Cores (and AMX units on recent Intel CPUs) run such products several times faster than fp32 ones, and every 16-bit
tensor moves half the bytes through memory.

**Automatic mixed precision (AMP)** uses that. Inside an `autocast` block, PyTorch runs each operation in the
precision its device's list gives it: matrix products in **fp16** or **bf16**; losses and, on a GPU, softmax, exp,
log, sums and normalisations in fp32 (on a CPU far fewer ops go to fp32: *Adding AMP* shows the measured lists).
The model's weights, their gradients and the optimizer's update stay in fp32. With fp16, a **GradScaler**
multiplies the loss before the backward pass so that small gradients do not round to zero. That is three small
changes to a training script. The time it saves comes from two places: the matrix products move onto Tensor Cores,
and the memory-bound operations (the activations written and read by ReLU, pooling and the rest, most of this
CNN's GPU kernels) move roughly half the bytes (max-pooling's int64 indices stay as large). The memory it saves is the activations kept for the backward pass. The lab
reports 75 s -> 48 s on its GPU, 1.56x as fast (36% less time); what you get depends on the device.
"""
)

st.subheader("What you will do")
st.markdown(
    """
1. **The fp32 baseline**: read the lab's script, a small CNN trained on CIFAR-10 in plain fp32.
2. **Adding AMP**: see the three lines that turn it into mixed-precision training, and why each is there.
3. **Autocast layer by layer, number formats, loss scaling**: see which layers autocast runs in low precision,
   look inside the formats from fp32 to fp8, watch gradients underflow and the loss scaler at work.
4. **Where the memory goes**: measure what one training step holds, fp32 beside AMP, and what AMP shrinks.
5. **Run the experiment**: train fp32 and AMP on this server, one after the other, and watch them live.
6. **Results, When AMP pays off and History**: compare time, memory, throughput, loss and accuracy beside the
   figures the lab itself reports, find out why your speedup is what it is, and put any two runs side by side.
7. **The AMP recipe**: the patterns your own training code needs beyond the lab's three lines.

On most pages you are asked to predict a number before the measurement shows it: commit to a guess, then check.
"""
)

st.subheader("This server")
report = server_bundle.hardware()
unseen_gpu = server_bundle.unseen_gpu()
if unseen_gpu:
    st.warning(unseen_gpu)
hardware_panel(report)

st.subheader("Quick demo")
demo = server_bundle.offer().quick_demo()
demo_run = demo.runs[0]
st.markdown(
    f"Compare fp32 with AMP on a small job: {demo_run.subset:,} synthetic images, "
    f"{demo_run.epochs} epoch, batch {demo_run.batch_size}, data held on the device. It usually "
    "finishes within a minute or two (longer if other learners' jobs are queued)."
)
# The quick demo as recorded on this kind of device (reference/), so that a guess can be checked before any run.
demo_reference = next(iter(load_references(device_type=report.device_type, purpose="quick-demo")), None)
demo_mode = demo_reference.candidate.precision if demo_reference else "AMP"
if predict_then_check(
    "quick-demo-speedup", f"In the quick demo on a {report.device_type.upper()} like this server's, how many times "
    f"as fast as fp32 will {demo_mode} train (1.00x: as fast; below 1: slower)?",
    low=0.0, high=4.0, default=1.5, step=0.05, fmt="%.2fx",
    answer=demo_reference.speedup if demo_reference else None,
    pending=f"No quick demo has been recorded on a {report.device_type.upper()} yet: run it below, and the Run page "
    "checks the same guess against your own comparison.",
) and demo_reference is not None:
    st.caption(f"Measured in a reference run, not yours: {demo_reference.label}. {demo_reference.note}")
if jobs.queue_button("Run the quick demo", demo, primary=True):
    st.switch_page(RUN_PAGE)

next_link("pages/fp32_baseline.py", "the fp32 baseline")
