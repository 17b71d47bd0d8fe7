"""When AMP pays off: where a run's time goes, a sweep over batch sizes (and widths), and a verdict in words."""

import streamlit as st

from lessons.payoff import breakdown_sentence, summarize_breakdown, summarize_sweep, verdict
from lessons.step_budget import PUBLISHED_SOURCE, lab_step_on, tensor_cores_sentence
from server.batch_probe import PROBE_CEILING
from server.offer import (
    BREAKDOWN_STEPS,
    MAX_SWEEP_RUNS,
    SWEEP_BATCH_SIZES,
    SWEEP_LOADERS,
    SWEEP_WIDTHS,
)
from trainer.comparison_table import format_bytes
from trainer.errors import TrainerError
from trainer.results import MEMORY_LABELS
from ui import jobs, server_bundle
from ui.learn_charts import breakdown_chart, sweep_chart, sweep_speedup_chart
from ui.predict import predict_then_check
from ui.reference import Reference, reference_rows, reference_sweep, this_machine, this_machine_class
from ui.widgets import amp_step_picture, ladder_panel, next_link, roofline_panel, when

BREAKDOWN_KEY = "when_amp_pays_breakdown_job"
SWEEP_KEY = "when_amp_pays_sweep_job"
SPEEDUP_QUESTION = ("how fast will {mode} train at batch {batch}{width}, as a multiple of fp32's images/s "
                    "(1.00x: as fast as fp32; below 1: slower)?")


def breakdown_jobs() -> list:
    """Finished time-breakdown jobs: this learner's newest first, then the server's."""
    return [job for job in jobs.mine_then_class(kind="breakdown", limit=20) if job.results]


def sweep_label(job) -> str:
    mine = " (yours)" if jobs.is_mine(job) else ""
    return f"{when(job.created_at)} · {job.label or 'sweep'} · {job.status}{mine}"


def show_sweep(job) -> None:
    """A sweep's verdict, figures and largest batches, as far as its runs have come."""
    rows = [row.to_dict() for row in summarize_sweep(job.outcomes)]
    if job.status in ("failed", "cancelled"):
        st.warning(f"This sweep {job.status}: {job.error}")
    if not rows:
        st.info("No run of this sweep has finished yet.")
        return
    st.markdown(f"**Verdict:** {verdict(summarize_sweep(job.outcomes), planned=len(job.spec.runs))}")
    sweep_figures(rows)
    largest = job.extras.get("max_batch")
    if largest:
        width = job.spec.runs[0].width
        parts = [f"{precision}: {'at least ' if b >= PROBE_CEILING else ''}{b:,}" for precision, b in largest.items()]
        st.markdown(f"**Largest batch that fits in GPU memory** (width {width}): " + " · ".join(parts) + ".")
    elif job.extras.get("max_batch_note"):
        st.caption(job.extras["max_batch_note"])


def sweep_figures(rows: list[dict]) -> None:
    """Throughput, memory and speedup against batch size, and the table: for a learner's sweep or a reference."""
    left, right = st.columns(2)
    left.altair_chart(sweep_chart(rows, "images_per_s", "Training throughput", "images/s (steady state)"),
                      width="stretch")
    memory = [dict(r, peak_memory_mb=r["peak_memory_bytes"] / 1e6 if r["peak_memory_bytes"] else None) for r in rows]
    right.altair_chart(sweep_chart(memory, "peak_memory_mb", "Peak memory", "MB", ",.0f"), width="stretch")
    st.altair_chart(sweep_speedup_chart(rows), width="stretch")
    labels = {r["memory_label"] for r in rows if r["memory_label"]}
    if labels:
        st.caption("Memory figure: " + "; ".join(MEMORY_LABELS.get(label, label) for label in sorted(labels)) + ".")
    st.dataframe(
        [
            {
                "precision": r["precision"], "batch": r["batch_size"], "width": r["width"], "status": r["status"],
                "images/s": None if r["images_per_s"] is None else round(r["images_per_s"]),
                "peak memory": format_bytes(r["peak_memory_bytes"]) if r["peak_memory_bytes"] else "-",
                "speedup vs fp32": "baseline" if r["precision"] == "fp32" else
                ("-" if r["speedup"] is None else f"{r['speedup']:.2f}x"),
            }
            for r in rows
        ],
        hide_index=True,
    )


def show_reference_sweep(references: list[Reference]) -> None:
    """A recorded sweep, labelled as reference with machine, date and settings; never mixed with this server's."""
    batches = ", ".join(str(r.baseline.config.batch_size) for r in references)
    st.markdown(f"**Reference sweep** (not your runs): fp32 vs {references[0].candidate.precision} at batch "
                f"{batches}, recorded with the project's command line, one `compare` per batch size.")
    sweep_figures([row.to_dict() for row in reference_rows(references)])
    for reference in references:
        st.caption(f"Reference: {reference.label}")
    for note in dict.fromkeys(r.note for r in references):
        st.caption(note)
    st.code("\n".join(r.command for r in references), language="bash")


def predict_speedup(key: str, where: str, mode: str, batch: int, width: int | None, answer: float | None,
                    pending: str = "") -> bool:
    """The page's predict-then-check: AMP's speedup over fp32 at one batch size of a sweep."""
    question = SPEEDUP_QUESTION.format(mode=mode, batch=batch, width="" if width is None else f", width {width}")
    return predict_then_check(key, f"{where}: {question}", low=0.0, high=4.0, default=1.5, step=0.05, fmt="%.2fx",
                              answer=answer, pending=pending, log=True)


def predict_on_sweep(job) -> bool:
    """Predict AMP's speedup at the sweep's largest batch (at its narrowest width); checked once both runs are in."""
    widths = sorted({config.width for config in job.spec.runs})
    batch = max(config.batch_size for config in job.spec.runs if config.width == widths[0])
    mode = next(config.precision for config in job.spec.runs if config.precision != "fp32")
    answer = next((row.speedup for row in summarize_sweep(job.outcomes)
                   if row.precision == mode and (row.batch_size, row.width) == (batch, widths[0])), None)
    pending = (f"This sweep has no {mode} speedup at batch {batch}: its table below says why." if job.finished else
               f"The answer appears once batch {batch} has run in both modes.")
    return predict_speedup("sweep-speedup", f"In the sweep \"{job.label or 'sweep'}\"", mode, batch,
                           widths[0] if len(widths) > 1 else None, answer, pending)


offer = server_bundle.offer()
manager = server_bundle.job_manager()
source = offer.default_data

st.title("When AMP pays off")
amp_step_picture("when_amp_pays")
st.markdown(
    """
AMP speeds a step up in two ways. Matrix products (convolutions, linear layers) run on Tensor Cores (on a CPU,
its AMX or bf16 units) with 16-bit inputs and fp32 accumulation; and memory-bound operations (ReLU, pooling,
reading and writing activations), most of this CNN's GPU kernels, move roughly half the bytes (max-pooling's int64
indices stay as large). It does not halve the
arithmetic: the same operations run, some of them faster. A step gains only where those operations are what it
waits for: if the GPU (or CPU) sits idle waiting for the next batch, or if the batch is so small that fixed costs
per step (launching kernels, Python, the optimizer) dominate, AMP changes little. This page measures both on
this server.
"""
)
with st.expander("On a CPU, a third cost: fresh memory"):
    st.markdown(
        """
With the C library's default settings, every large activation and gradient of a step is mapped fresh from the
operating system, which zeroes each page before handing it over; for the lab's model at batch 256 that alone took a
third of an fp32 step and two fifths of a bf16 step on this project's CPU. The trainer therefore tells the allocator
to reuse freed memory on CPU runs; each result records it under `host_malloc` in its environment, and `python -m
trainer run --default-malloc` times the default.
"""
    )

st.subheader("The step's budget")
st.markdown(lab_step_on("H200 SXM").paragraph())
st.markdown(tensor_cores_sentence("H200 SXM") + " Results sets each of your comparisons against this server's own "
            "measured peaks.")
st.caption(f"H200 SXM peaks: {PUBLISHED_SOURCE}. The lab ran on its own Tensor Core GPU, not an H200; on a slower one "
           "the arithmetic's share is larger, and still small.")

st.subheader("The roofline of the lab's model")
st.markdown(
    """
Each layer of a training step moves bytes and, for the convolutions and linear layers, does arithmetic. Its
*intensity*, FLOPs per byte, decides which of the device's two limits it meets first: below the ridge (peak rate ÷
bandwidth) its bytes bound it, and a faster arithmetic changes nothing; above, its arithmetic does. The bytes are
counted from the layer shapes (each tensor read or written once per kernel, no cache reuse: a lower bound), the
FLOPs are torch's own count. Under AMP every layer moves fewer bytes (16-bit activations) and the products run at
the 16-bit rate; the fp32 master weights, the optimizer and the casts AMP adds do not shrink.
"""
)
roofline_panel()

st.subheader("The ladder to the fastest lab run")
st.markdown(
    """
The same workload, one change at a time, each rung measured against the lab's own loop in the same harness:
data held on the device, AMP, `channels_last`, `torch.compile` (its compile time apart), CUDA graphs (GPU only),
and the largest batch that still trains to the lab's accuracy. Each step up removes one of the costs the budget
above names.
"""
)
ladder_panel()

st.subheader("1. Where the time goes")
st.markdown(
    "The same short run twice, once with the lab's DataLoader (turning every image into a PIL image and a "
    "tensor in worker processes) and once with the whole dataset resident on the device, timing for each step how long it waited "
    "for its batch and how long it computed."
)
offered, _ = offer.compared_precisions()
left, middle, right = st.columns(3)
breakdown_precision = left.selectbox("Precision", ("fp32", *offered), key="breakdown_precision")
batches = offer.batch_sizes(SWEEP_BATCH_SIZES)
breakdown_batch = middle.select_slider("Batch size", options=batches,
                                       value=max([b for b in batches if b <= 256] or batches[:1]), key="breakdown_batch")
steps = right.slider("Steps per run", min_value=10, max_value=100, value=BREAKDOWN_STEPS, step=10,
                     key="breakdown_steps")
try:
    breakdown_spec = offer.breakdown(breakdown_precision, breakdown_batch, steps)
except TrainerError as err:
    st.error(str(err))
    breakdown_spec = None
jobs.queue_or_follow(BREAKDOWN_KEY, "Measure where the time goes", breakdown_spec)
finished = breakdown_jobs()
if finished:
    latest = finished[0]
    rows = summarize_breakdown(latest.results)
    st.caption(f"From {latest.label}, {when(latest.finished_at)}.")
    st.altair_chart(breakdown_chart([r.to_dict() for r in rows]), width="stretch")
    st.markdown(f"**What this says:** {breakdown_sentence(rows)}")
else:
    st.info("No time breakdown on this server yet: measure one above.")

st.subheader("2. A sweep over batch sizes")
st.markdown(
    f"Short timed runs of fp32 and an AMP mode at several batch sizes (and, if you like, model widths), one after "
    f"the other in one job: at most {MAX_SWEEP_RUNS} runs, so up to {MAX_SWEEP_RUNS // 2} batch-size/width "
    "points. Throughput is measured after the warm-up steps. Wider models do more arithmetic per image, which is "
    "where AMP has the most to gain."
)
left, right = st.columns(2)
swept = offer.sweep_precisions  # tf32 is offered for comparisons, but a sweep pits fp32 against an AMP mode
amp_mode = left.selectbox("AMP mode", swept, index=swept.index(offer.default_precision(swept)), key="sweep_amp")
defaults = offer.sweep_defaults()  # the instructor's presets where they fix a batch, a width or a loader
chosen_batches = left.multiselect("Batch sizes", batches, default=defaults["batch_sizes"], key="sweep_batches")
chosen_widths = right.multiselect("Model widths", SWEEP_WIDTHS, default=defaults["widths"], key="sweep_widths")
steps_per_run = right.slider("Steps per run", min_value=10, max_value=60, value=defaults["steps"], step=5,
                             key="sweep_steps")
loader = right.selectbox("Loader", SWEEP_LOADERS, index=SWEEP_LOADERS.index(defaults["loader"]), key="sweep_loader",
                         help="Resident keeps data loading out of the way, so the sweep measures the arithmetic.")
sweep_spec = None
try:
    sweep_spec = offer.sweep(amp_mode, chosen_batches, chosen_widths, steps_per_run, loader)
except TrainerError as err:  # said now, not at submit, when a point asks for more than this server allows
    st.error(str(err))
plan = sweep_spec.runs if sweep_spec else None
if sweep_spec:
    st.caption(f"{len(plan)} runs on {source} data.")
if offer.device_type == "cuda":
    st.caption("After the runs, the job also searches the largest batch that fits in GPU memory for each precision "
               "(a bounded search: doubling, then bisecting, each try a two-step run in its own process).")
else:
    st.caption("The search for the largest batch that fits applies to GPUs, where device memory is the limit; "
               "this server trains on the CPU, so the sweep skips it.")
jobs.queue_or_follow(SWEEP_KEY, "Queue the sweep", sweep_spec, primary=True)

st.subheader("3. Sweep results")
sweeps = jobs.mine_then_class(kind="sweep")
reference = reference_sweep(manager.device_type, like=this_machine())
# One guess per page view: on the sweep shown if there is one, else on the reference sweep, else on the sweep set
# up above (checked once it is queued and has run).
reference_open = bool(sweeps)
if not sweeps:
    st.info("No sweep on this server yet: queue one above. Finished sweeps stay in the history and can be "
            "reopened here.")
    if reference:
        largest = reference[-1].baseline.config.batch_size
        machine = reference[-1].label.split(" · ")[0]
        reference_open = predict_speedup(
            "reference-speedup", f"Reference recorded on {machine}, not your run",
            reference[-1].candidate.precision, largest, None,
            next((row.speedup for row in reference_rows(reference) if row.batch_size == largest and row.speedup), None),
        )
    elif plan and sweep_spec and not jobs.refusal(sweep_spec):  # no question a learner may not queue the answer to
        planned_widths = sorted({config.width for config in plan})
        predict_speedup("sweep-speedup", "In the sweep set up above", amp_mode,
                        max(config.batch_size for config in plan if config.width == planned_widths[0]),
                        planned_widths[0] if len(planned_widths) > 1 else None, None,
                        "Queue the sweep above to check: the answer is what it measures.")
else:
    by_id = {job.id: job for job in sweeps}
    chosen = st.selectbox("Sweep", list(by_id), format_func=lambda job_id: sweep_label(by_id[job_id]),
                          key="sweep_shown", help="This session's sweeps first, then every sweep on this server.")
    shown_job = by_id[chosen]
    if predict_on_sweep(shown_job):
        jobs.follow(shown_job.id, show_sweep)  # a running sweep's points as they come in
if reference:
    with st.expander(f"Reference sweep recorded on {this_machine_class()}, like this server (not your runs)",
                     expanded=not sweeps):
        if reference_open:
            show_reference_sweep(reference)
        else:
            st.caption("Lock in a guess above (or just show the answer) to see the reference sweep.")

next_link("pages/recipe.py", "the recipe: AMP in your own training code")
