"""The fp32 baseline: the lab's model, data pipeline and training loop, and the project's baseline script."""

import streamlit as st

from lessons.tf32 import states
from trainer.errors import TrainerError
from trainer.model import SimpleCNN, count_parameters
from ui import server_bundle
from ui.lab_code import BASELINE_SCRIPT, read_script
from ui.predict import predict_then_check
from ui.reference import quick_demo_answer, this_machine_class
from ui.widgets import amp_step_picture, next_link

# The throughput slider per device (low, high, start, step). CPU: from a loaded 2-core EPYC (about 100 images/s, the
# reference) to a calm 2-core Xeon with AMX (2,864, bench/README.md's benchmark). GPU: the small CNN is bound by kernel
# launches, about 2 ms a step of 256 (docs/gpu-check.md's estimate), some 130,000 images/s.
THROUGHPUT_GUESS = {"cpu": (0.0, 3000.0, 1000.0, 25.0), "cuda": (0.0, 200_000.0, 50_000.0, 1000.0)}


@st.cache_data(show_spinner="Reading PyTorch's TF32 switches in a fresh Python...")
def tf32_states() -> list[dict]:
    return [state.to_dict() for state in states()]


st.title("The fp32 baseline")
amp_step_picture("fp32_baseline")
st.markdown(
    """
Before changing anything, measure where you start. The baseline trains a small convolutional network on
CIFAR-10 (50,000 colour images of 32 x 32 pixels in 10 classes) with every number in fp32, and times it.
Everything later on this site is compared against it.
"""
)

st.subheader("The model")
st.markdown(
    f"`SimpleCNN` has two feature blocks and a classifier, {count_parameters(SimpleCNN(1)):,} parameters in all. "
    "The convolutions and the two linear layers are matrix products: they hold almost all of the arithmetic, and "
    "they are exactly what AMP will move to 16-bit numbers."
)
st.table(
    [
        {"Layer": "Conv 3x3, 3 → 32 channels, ReLU, max-pool 2", "Shape in → out": "3x32x32 → 32x16x16",
         "What it does": "finds edges and colour patches"},
        {"Layer": "Conv 3x3, 32 → 64 channels, ReLU, max-pool 2", "Shape in → out": "32x16x16 → 64x8x8",
         "What it does": "combines them into larger shapes"},
        {"Layer": "Flatten, Linear 4096 → 512, ReLU", "Shape in → out": "4096 → 512",
         "What it does": "mixes every feature"},
        {"Layer": "Linear 512 → 10", "Shape in → out": "512 → 10", "What it does": "one score per class"},
    ],
    hide_index=True,
)

st.subheader("The data and the training loop")
st.markdown(
    """
Five epochs of stochastic gradient descent (learning rate 0.01, momentum 0.9) on the cross-entropy loss, in
batches of 256. Each step clears the old gradients, runs the forward pass and the loss, runs `loss.backward()` to
fill every parameter's `.grad`, and updates the weights with `optimizer.step()`. A `DataLoader` prepares the
batches on the CPU: with a fast GPU and a model this small, it can become the slowest part of the run.
"""
)
with st.expander("Deeper: the data pipeline, and timing GPU work"):
    st.markdown(
        """
- `torchvision.datasets.CIFAR10` reads the images (and downloads them into `./data` the first time).
- Each image goes through `ToTensor()` (bytes 0..255 become floats 0..1, channels first) and
  `Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))` (so every pixel lies between -1 and 1).
- A `DataLoader` shuffles the images each epoch and stacks them into batches of 256, prepared by 4 worker
  processes while the model trains.

CIFAR-10's images are stored as raw pixels, so nothing is decoded: every image still becomes a PIL image, then a
tensor (`ToTensor`), then a normalised one (`Normalize`), on the CPU, every epoch.

Every 100 batches the script prints the mean loss, and at the end the total training time. GPU work runs
asynchronously, so a clock read too early stops before the GPU has finished; the script's `loss.item()` on every
step already waits for the GPU (it copies the loss to the CPU), so its clock is right, and that wait itself costs
time on every step; it also calls `torch.cuda.synchronize()` before the last reading.
"""
    )

st.subheader("How fast is the baseline here?")
device_type = server_bundle.job_manager().device_type
# Answered by the quick demo's fp32 run (the learner's own, else one recorded on this kind of device), so the
# question names the demo's settings: its resident synthetic images train far faster than the lab's DataLoader.
answer = quick_demo_answer()
demo = server_bundle.offer().quick_demo().runs[0]
low, high, start, step = THROUGHPUT_GUESS[device_type]
if predict_then_check(
    "baseline-throughput",
    f"How many images per second does the lab's model train in fp32 in the quick demo (batch {demo.batch_size}, "
    f"{demo.subset:,} synthetic images in memory) on {this_machine_class()}?",
    low=low, high=high, default=start, step=step, fmt="%.0f images/s", log=True,
    answer=answer.baseline.steady_images_per_s if answer else None,
    answered_by=answer.answered_by if answer else None,
    pending=f"No quick demo has been recorded on {this_machine_class()} yet: run yours from the Overview, and it "
    "answers this once it has finished.",
) and answer is not None:
    quality = answer.baseline.timing_quality or {}
    st.caption(f"{answer.provenance} Steady throughput after {answer.baseline.warmup_steps} warm-up steps, timing "
               f"{quality.get('verdict', 'not rated')}.")

st.subheader("Is fp32 really fp32?")
st.markdown(
    """
On NVIDIA GPUs from Ampere on, PyTorch lets cuDNN run fp32 convolutions in **TF32** (products of 10-bit
mantissas, summed in fp32) by default, so the lab's "fp32" convolutions run in TF32 there. This app's **fp32**
mode turns TF32 off; its **fp32-default** mode runs as the lab's baseline does. On a CPU, and on older GPUs, the
two are the same.
"""
)
with st.expander("Deeper: TF32, the two fp32 modes, and this server's switches"):
    st.markdown(
        """
On NVIDIA GPUs from Ampere on, Tensor Cores can run an fp32 convolution or matmul in **TF32**: the tensors stay
fp32, but each product uses only 10 mantissa bits (fp16's precision with fp32's range), accumulated in fp32.
PyTorch allows it for cuDNN convolutions by default and, since version 1.12, not for matmuls (PyTorch docs, CUDA
semantics, "TensorFloat-32 (TF32) on Ampere (and later) devices"). The lab's script sets no flags, so on such a
GPU **its "fp32" convolutions already run in TF32**. So this app has two fp32 modes:

- **fp32**, *strict* fp32: TF32 off for convolutions and matmuls. It is the baseline of every comparison on the Run
  page, so on those GPUs it is slower than the lab's baseline, and the AMP speedups measured against it larger, for
  that reason alone.
- **fp32-default**, *fp32 as PyTorch defaults*: the switches left as PyTorch sets them, so it runs as **the lab's
  baseline** does. Pick it on the Run page to see what TF32 convolutions alone change against strict fp32; the
  **tf32** mode turns TF32 on for the matmuls too.

Every run records the switches it ran with, so a result says which fp32 it used. On a CPU, and on GPUs older than
Ampere, there is no TF32 and the two fp32 modes are the same arithmetic, so the Run page does not offer
fp32-default there. Read from this server's PyTorch, in a fresh process:
"""
    )
    try:
        tf32 = tf32_states()
    except TrainerError as err:
        st.error(str(err))
    else:
        st.table(  # an HTML table wraps its cells at 800 px; a grid would hide its last column
            [
                {"setting": s["setting"], "GPU convolutions": s["cuda_conv"], "GPU matmuls": s["cuda_matmul"],
                 "CPU (oneDNN) convolutions and matmuls": f"{s['cpu_conv']} / {s['cpu_matmul']}"}
                for s in tf32
            ],
            hide_index=True,
        )
        st.caption(
            f"ieee = true fp32, tf32 = 10-bit products. This PyTorch spells the switches `{tf32[0]['api']}` "
            "(`torch.backends.cudnn.conv.fp32_precision` and `torch.backends.cuda.matmul.fp32_precision` in recent "
            "versions, `allow_tf32` in older ones)."
        )

st.subheader(f"The script: lab/{BASELINE_SCRIPT}")
st.caption(
    "The project's own version of the lab's baseline. Run it with `python lab/fp32_baseline.py`, or add "
    "`--synthetic --subset 2048 --epochs 1` for a quick check without downloading CIFAR-10."
)
st.code(read_script(BASELINE_SCRIPT), language="python", line_numbers=True, wrap_lines=True)
next_link("pages/adding_amp.py", "adding AMP")
