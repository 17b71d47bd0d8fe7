"""Where the memory goes: one training step of the lab model, fp32 beside AMP, measured component by component."""

import streamlit as st

from lessons.memory_breakdown import (
    BACKWARD_EXTRA,
    CONTEXT,
    RESERVE,
    MemoryBreakdown,
    MemoryComparison,
    measure_in_fresh_process,
    peaks_by_batch,
)
from server.offer import MEMORY_BATCH_SIZES, MEMORY_SWEEP_BATCH_SIZES
from trainer.errors import TrainerError
from ui import server_bundle
from ui.learn_charts import memory_breakdown_chart, memory_by_batch_chart
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link


@st.cache_data(show_spinner="Measuring one training step in each mode, in a fresh Python...", max_entries=16)
def breakdowns(device: str, precisions: tuple[str, ...], batch_sizes: tuple[int, ...]) -> list[dict]:
    env = server_bundle.gpu_child_env() if device == "cuda" else None
    return [b.to_dict() for b in measure_in_fresh_process(precisions, batch_sizes, device=device, env=env)]


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.1f} MB"


def explain_step(step: MemoryComparison, amp: str, batch: int, device: str) -> None:
    """The stacked chart, the table and what they say."""
    fp32, mixed = step.fp32, step.mixed
    st.altair_chart(memory_breakdown_chart(fp32.rows() + mixed.rows()), width="stretch")
    st.dataframe([{name: mb(value) if name != "component" else value for name, value in row.items()}
                  for row in step.component_rows()], hide_index=True)
    workspaces = " (and on a GPU, cuDNN's workspaces)" if device == "cuda" else ""
    nvidia_smi = ("" if device != "cuda" else f"; with the allocator's reserve and the CUDA context, the whole bar, "
                  f"{mb(fp32.total)} -> {mb(mixed.total)} ({step.total_saving:.0%} less)")
    st.markdown(
        f"""
    **What this says, at batch {batch} on this {device.upper()}:**
    - Weights, gradients and momentum: **{mb(step.fixed)} in both modes**. AMP does not shrink them.
    - Autocast's 16-bit weight copies add **{mb(step.weight_copies)}** to the {amp} step.
    - Saved activations: **{mb(fp32.saved_activations)} -> {mb(mixed.saved_activations)}**
      ({step.activation_saving:.0%} less), of which **{mb(step.pool_indices)}** are max-pool's int64
      indices, the same in both.
    - The step's tensors at their peak (the allocator's own count): **{mb(fp32.peak)} -> {mb(mixed.peak)}**
      ({step.peak_saving:.0%} less){nvidia_smi}.
      "{BACKWARD_EXTRA}" is what the backward pass holds beyond the rest at its peak: the gradients flowing back
      through the layers before the activations they replace are freed{workspaces},
      {mb(fp32.components[BACKWARD_EXTRA])} in fp32.
    """
    )
    st.caption(
        f"Check: at the end of the forward pass the tensors found add up to {mb(fp32.forward_components)} (fp32) "
        f"and {mb(mixed.forward_components)} ({amp}); the allocator, counting on its own, had {mb(fp32.forward_live)} "
        f"and {mb(mixed.forward_live)} live then. The peak is the allocator's most bytes live at once in the step."
    )
    if device == "cuda":
        for result in (fp32, mixed):
            for note in result.notes:
                st.caption(f"{result.precision}: {note}")
        if fp32.process_total and mixed.process_total:
            st.markdown(
                f"nvidia-smi sees **{mb(fp32.process_total)} -> {mb(mixed.process_total)}** for this process: the "
                f"tensors above, plus the caching allocator's reserve ({mb(fp32.components.get(RESERVE, 0))} -> "
                f"{mb(mixed.components.get(RESERVE, 0))}) and the CUDA context with cuDNN and cuBLAS "
                f"({mb(fp32.components.get(CONTEXT, 0))} -> {mb(mixed.components.get(CONTEXT, 0))}), measured in each "
                "mode: what the two do differs between runs and libraries, so nvidia-smi's change need not be the "
                "tensors' change."
            )
    peak_saved = fp32.peak - mixed.peak
    st.info(
        f"**The lab's 1.8 GB -> 1.1 GB cannot come from this model's tensors.** At batch {batch} the step's tensors "
        f"peak at {mb(fp32.peak)} in fp32 and AMP saves {mb(peak_saved)} of them (the allocator's own peak, measured "
        "here), far from the lab's 700 MB. What nvidia-smi adds could explain it: the CUDA context and the "
        "libraries it loads (several hundred MB, and which kernels cuDNN and cuBLAS load differs between fp32 and "
        "16-bit runs), and the caching allocator's reserve (freed blocks it keeps, which depends on the order the "
        "step asks for memory). The lab does not say what else its process held; "
        + ("compare the two figures measured above." if device == "cuda" else
           "run this page on the class's GPU server to see both measured.")
    )


def batch_sweep(amp: str, device: str) -> None:
    """The step's peak in both modes at a few batch sizes, measured on request."""
    st.subheader("At which batch size does AMP's saving become large?")
    st.markdown(
        "Weights, gradients, momentum (and the CUDA context) are fixed; saved activations grow with the batch. So at "
        "small batches AMP saves little, or even costs memory through its weight copies, and the saving approaches "
        "the activations' own saving as the batch grows."
    )
    sweep_batches = server_bundle.offer().batch_sizes(MEMORY_SWEEP_BATCH_SIZES)
    if st.button(f"Measure at batch sizes {', '.join(map(str, sweep_batches))}"):
        st.session_state["memory-sweep"] = sweep_batches
    if st.session_state.get("memory-sweep") == sweep_batches:
        try:
            found = [MemoryBreakdown.from_dict(d) for d in breakdowns(device, ("fp32", amp), sweep_batches)]
        except TrainerError as err:
            st.error(f"Could not measure the sweep: {err}")
        else:
            rows = peaks_by_batch(found)
            st.altair_chart(memory_by_batch_chart(rows), width="stretch")
            st.markdown(" · ".join(f"batch {row['batch_size']}: {row['saving']:.0%} less"
                                   for row in rows if row["precision"] == amp))
    elif device == "cpu":
        st.caption(f"On this CPU a {amp} step at batch 512 takes several seconds: expect up to a minute.")


st.title("Where the memory goes")
amp_step_picture("memory")
st.markdown(
    """
The lab reports that AMP needs about 39% less GPU memory (1.8 GB -> 1.1 GB in nvidia-smi). Where does that come
from? With `torch.amp`, the **weights, their gradients and the optimizer's state stay fp32**: autocast casts a
weight to 16 bits when an op first uses it, and *adds* that copy, one per weight for each autocast region (a
step's forward pass here), cached until the region ends. What shrinks is what autograd **saves
for the backward pass**: the activations that conv, ReLU and linear layers keep, now in 16 bits. Not all of them:
max-pooling saves the position of each maximum as an int64 index, 8 bytes per output value in every mode.
Below, one step of the lab's model is measured in both modes.
"""
)
with st.expander("Deeper: how the step is measured"):
    st.markdown(
        "One step of the lab's model is measured twice in a fresh Python: each component is the size of the real "
        "tensors it holds (autograd's saved-tensor hooks report every tensor the forward pass keeps), and the totals "
        "come from the allocator itself."
    )

device = server_bundle.job_manager().device_type
if device == "cuda" and not server_bundle.gpu_is_idle():
    # The measurement is a short GPU process outside the queue: it must not take memory or time from a timed run.
    st.info("A learner's job is training on the GPU right now, so this page measures on the CPU until it ends "
            "(the breakdown of the tensors is the same; the CUDA context and the allocator's cache are GPU-only).")
    device = "cpu"
offer = server_bundle.offer()
amp = offer.default_precision()
batches = offer.batch_sizes(MEMORY_BATCH_SIZES)
asked = st.query_params.get("batch", "256")
default_batch = int(asked) if asked.isdigit() and int(asked) in batches else min(batches, key=lambda b: abs(b - 256))
batch = st.select_slider("Batch size", options=batches, value=default_batch,
                         help="The lab trains at 256. Activations grow with the batch; weights and optimizer state "
                              "do not.")

try:
    step = MemoryComparison(*(MemoryBreakdown.from_dict(d) for d in breakdowns(device, ("fp32", amp), (batch,))))
except TrainerError as err:
    st.error(f"Could not measure the step: {err}")
    st.stop()
# Below zero too: at the smallest batches AMP's 16-bit weight copies outweigh the activations it saves.
revealed = predict_then_check(
    "memory-saving", f"At batch {batch}, how much less memory will the {amp} step's tensors need at their peak than "
    "fp32's (below 0%: more)?", low=-50, high=80, default=40, step=5, fmt="%d%%",
    answer=round(100 * step.peak_saving),
)
if revealed:
    explain_step(step, amp, batch, device)
    batch_sweep(amp, device)

next_link("pages/run_experiment.py", "run the experiment")
