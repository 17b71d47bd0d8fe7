"""Overview: what AMP is, what the learner will do, what this server's hardware promises, and a quick demo."""

import streamlit as st

from ui import jobs, session
from ui.experiment import QUICK_DEMO, quick_demo_spec
from ui.widgets import RUN_PAGE, hardware_panel

st.title("AMP Lab: faster training with mixed precision")

st.markdown(
    """
A normal PyTorch training run keeps every number in **fp32**, 32-bit floating point. Most of that precision
is wasted on a neural network: the big matrix products in convolutions and linear layers work just as well
with 16-bit numbers, and modern hardware multiplies 16-bit numbers several times faster, while moving half
the bytes through memory.

**Automatic mixed precision (AMP)** uses that. Inside an `autocast` block, PyTorch runs each operation in the
precision that suits it: matrix products in **fp16** or **bf16**, and the operations that need range or
accuracy (softmax, losses, reductions, the weight update) in fp32. The model's weights stay in fp32. With fp16,
a **GradScaler** multiplies the loss before the backward pass so that small gradients do not round to zero.
That is three small changes to a training script, and on a GPU with Tensor Cores it often makes training
a third faster or more, with less memory for activations.
"""
)

st.subheader("What you will do")
st.markdown(
    """
1. **The fp32 baseline**: read the lab's script, a small CNN trained on CIFAR-10 in plain fp32.
2. **Adding AMP**: see the three lines that turn it into mixed-precision training, and why each is there.
3. **Number formats, loss scaling, autocast layer by layer**: look inside fp16 and bf16, watch gradients
   underflow, and see which layers autocast runs in low precision.
4. **Run the experiment**: train fp32 and AMP on this server, one after the other, and watch them live.
5. **Results and History**: compare time, memory, throughput, loss and accuracy, and put any two runs side
   by side, beside the figures the lab itself reports.
"""
)

st.subheader("This server")
report = session.hardware()
hardware_panel(report)

st.subheader("Quick demo")
st.markdown(
    f"Compare fp32 with AMP on a small job: {QUICK_DEMO['subset']:,} synthetic images, "
    f"{QUICK_DEMO['epochs']} epoch, batch {QUICK_DEMO['batch_size']}, data held on the device. It usually "
    "finishes within a minute or two (longer if other learners' jobs are queued)."
)
if st.button("Run the quick demo", type="primary") and jobs.submit(quick_demo_spec(report)):
    st.switch_page(RUN_PAGE)
