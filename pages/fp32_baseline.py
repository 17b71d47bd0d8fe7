"""The fp32 baseline: the lab's model, data pipeline and training loop, and the project's baseline script."""

import streamlit as st

from lessons.tf32 import states
from trainer.errors import TrainerError
from trainer.model import SimpleCNN, count_parameters
from ui.lab_code import BASELINE_SCRIPT, read_script
from ui.widgets import next_link


@st.cache_data(show_spinner="Reading PyTorch's TF32 switches in a fresh Python...")
def tf32_states() -> list[dict]:
    return [state.to_dict() for state in states()]


st.title("The fp32 baseline")
st.markdown(
    """
Before changing anything, measure where you start. The baseline trains a small convolutional network on
CIFAR-10 (50,000 colour images of 32 x 32 pixels in 10 classes) with every number in fp32, and times it.
Everything later on this site is compared against it.
"""
)

st.subheader("The model")
st.markdown(
    f"""
`SimpleCNN` has two feature blocks and a classifier, {count_parameters(SimpleCNN(1)):,} parameters in all:

| Layer | Shape in → out | What it does |
|---|---|---|
| Conv 3x3, 3 → 32 channels, ReLU, max-pool 2 | 3x32x32 → 32x16x16 | finds edges and colour patches |
| Conv 3x3, 32 → 64 channels, ReLU, max-pool 2 | 32x16x16 → 64x8x8 | combines them into larger shapes |
| Flatten, Linear 4096 → 512, ReLU | 4096 → 512 | mixes every feature |
| Linear 512 → 10 | 512 → 10 | one score per class |

The convolutions and the two linear layers are matrix products: they hold almost all of the arithmetic, and
they are exactly what AMP will move to 16-bit numbers.
"""
)

st.subheader("The data pipeline")
st.markdown(
    """
- `torchvision.datasets.CIFAR10` reads the images (and downloads them into `./data` the first time).
- Each image goes through `ToTensor()` (bytes 0..255 become floats 0..1, channels first) and
  `Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))` (so every pixel lies between -1 and 1).
- A `DataLoader` shuffles the images each epoch and stacks them into batches of 256, prepared by 4 worker
  processes while the model trains.

This pipeline decodes and converts every image on the CPU, every epoch. With a fast GPU and a model this
small, it can become the slowest part of the run: keep that in mind when the AMP speedup looks small.
"""
)

st.subheader("The training loop")
st.markdown(
    """
Five epochs of stochastic gradient descent (learning rate 0.01, momentum 0.9) on the cross-entropy loss.
Each step:

1. clears the old gradients (`optimizer.zero_grad()`),
2. runs the forward pass and computes the loss,
3. runs the backward pass (`loss.backward()`), which fills every parameter's `.grad`,
4. updates the weights (`optimizer.step()`).

Every 100 batches it prints the mean loss, and at the end the total training time. On a GPU the script waits
for the GPU to finish (`torch.cuda.synchronize()`) before reading the clock, because GPU work runs
asynchronously and the clock would otherwise stop early.
"""
)

st.subheader("Is fp32 really fp32? TF32 on newer GPUs")
st.markdown(
    """
On NVIDIA GPUs from Ampere on, Tensor Cores can run an fp32 convolution or matmul in **TF32**: the tensors stay
fp32, but each product uses only 10 mantissa bits (fp16's precision with fp32's range), accumulated in fp32.
PyTorch allows it for cuDNN convolutions by default and, since version 1.12, not for matmuls (PyTorch docs, CUDA
semantics, "TensorFloat-32 (TF32) on Ampere (and later) devices"). The lab's script sets no flags, so on such a
GPU **its "fp32" convolutions already run in TF32**. This app's fp32 is *strict* fp32: it turns TF32 off, so its
fp32 baseline is slower than the lab's on those GPUs, and its AMP speedups larger, for that reason alone. On a CPU,
and on GPUs older than Ampere, there is no difference. Read from this server's PyTorch, in a fresh process:
"""
)
try:
    tf32 = tf32_states()
except TrainerError as err:
    st.error(str(err))
else:
    st.dataframe(
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
st.code(read_script(BASELINE_SCRIPT), language="python", line_numbers=True)
next_link("pages/adding_amp.py", "adding AMP")
