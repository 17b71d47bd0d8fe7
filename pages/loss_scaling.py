"""The scaler at work: GradScaler's dynamic loss scale in real amp-fp16 runs, an ablation that makes it work, and a
simulator of its rules."""

from itertools import pairwise

import numpy as np
import streamlit as st

from lessons.capture import capture_values
from lessons.scaler_sim import ScalerSettings, classify_skips, parse_steps, simulate_gradients
from lessons.underflow import MAX_SCALE_EXPONENT, search_skips
from server.offer import ABLATION_GROWTH_INTERVAL, ABLATION_INIT_EXPONENT
from trainer.errors import TrainerError
from ui import jobs, server_bundle
from ui.lab_capture import read_lab_model
from ui.learn_charts import scale_trace_chart, scale_traces_chart
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link, when

# Session-state keys of the two jobs this page follows (their names predate the page's split from Underflow).
TINY_RUN_KEY = "loss_scaling_tiny_job"
ABLATION_KEY = "loss_scaling_ablation_job"
FP16_OVERFLOW = 65520  # the smallest magnitude that rounds to inf in fp16


@st.cache_data(show_spinner="Training the lab model for a few steps to read its largest gradients...", max_entries=4)
def largest_gradients(source: str, data_root: str) -> dict[str, float]:
    """The largest |value| of the lab model's weight and activation gradients after a few fp32 steps."""
    capture = capture_values(source=source, data_root=data_root)
    return {label: float(np.abs(capture.all_values(kind)).max())
            for label, kind in (("weight", "gradients"), ("activation", "activation gradients"))}


def scale_label(exponent: int) -> str:
    return f"2^{exponent} = {2**exponent:,}"


def amp_fp16_runs() -> list[tuple[str, object]]:
    """Finished amp-fp16 runs with a loss-scale history: this session's first, then the server's history."""
    found = []
    for job in jobs.mine_then_class(status="done", precision="amp-fp16", limit=30):
        for index, result in enumerate(job.results):
            if result.precision != "amp-fp16" or not result.loss_scale_history:
                continue
            mine = " (yours)" if jobs.is_mine(job) else ""
            found.append((f"{job.label or job.kind} · run {index + 1} · {when(result.started_at)}{mine}", result))
    return found


def times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def scaler_name(config) -> str:
    if config.default_scaler:
        return "default scaler (2^16, grows after 2000)"
    return f"start {config.loss_scale_init:,.0f}, grows after {config.loss_scale_growth_interval}"


def tiny_run_note() -> None:
    """Above the tiny run's button: its wait on a CPU."""
    if on_cpu:
        st.caption("fp16 on this CPU is tens of times slower than fp32, so the tiny run uses 1,024 synthetic images "
                   "at batch 32: expect a minute or two.")


def before_the_ablation() -> None:
    """Above the ablation's button: the guess to lock first (until an ablation has run), and the wait on a CPU."""
    if not ablations:
        predict_then_check("search-skips", search_question, low=0, high=16, default=2, step=1, fmt="%d",
                           answer=None, pending="Run the ablation to check.")
    if on_cpu:
        st.caption("fp16 on this CPU is tens of times slower than fp32: the 256 images take tens of seconds.")


st.title("The scaler at work")
amp_step_picture("loss_scaling")
st.markdown(
    """
PyTorch's `torch.amp.GradScaler` picks the loss scale S for you, step by step. It starts high (65536 = 2^16 by
default) on purpose: a scale too high shows at once, as inf or NaN in the gradients, while one too low fails
silently. When a step's gradients hold an inf or NaN, the scaler **skips that optimizer step** (the weights do not
change) and halves S (its backoff factor, 0.5). After 2000 steps in a row without one, it doubles S (its growth
factor, 2) to probe upward again. A few skipped steps at the start are the scaler searching down for a scale where
the gradients fit; out of thousands, they cost almost nothing.
"""
)

st.subheader("GradScaler in a real amp-fp16 run")
runs = amp_fp16_runs()
on_cpu = server_bundle.job_manager().device_type == "cpu"
if runs:
    labels = [label for label, _ in runs]
    chosen = st.selectbox("Run", labels, help="amp-fp16 runs from this session and the server's history.")
    result = dict(runs)[chosen]
    st.altair_chart(
        scale_trace_chart(result.loss_scale_history, result.skipped_step_numbers, "Loss scale in this run"),
        width="stretch",
    )
    skipped = result.skipped_step_numbers
    if skipped:
        shown = ", ".join(map(str, skipped[:20])) + (" ..." if len(skipped) > 20 else "")
        st.markdown(f"The scaler skipped **{len(skipped)}** of {result.total_steps} steps: {shown}.")
    else:
        interval = result.config.loss_scale_growth_interval
        st.markdown(
            f"No step of these {result.total_steps} was skipped: this model's largest gradient times the scale "
            f"stayed below {FP16_OVERFLOW}, and the scale grows only after {interval} good steps in a row"
            + (", more than this run took, so the line is flat." if result.total_steps < interval else ".")
            + " The ablation below makes the scaler work."
        )
else:
    st.info("No finished amp-fp16 run with a loss-scale history on this server yet.")
    jobs.queue_or_follow(TINY_RUN_KEY, "Run a tiny amp-fp16 run", server_bundle.offer().tiny_fp16_run(),
                         failed="The tiny run did not finish", before=tiny_run_note)

st.subheader("An ablation: make the scaler work")
largest, source = read_lab_model(largest_gradients, "gradients")
if largest is not None:
    peak = max(largest.values())
    fits = peak * 2**16 < FP16_OVERFLOW
    st.markdown(
        f"In a capture of a few fp32 steps on {source} data, this model's largest gradient is {peak:.3g}; times "
        f"65,536 that is {peak * 2**16:,.0f}, "
        + ("below 65520: at the default 2^16 none of them overflows, so the scaler has no reason to back off."
           if fits else "65520 or more: at the default 2^16 it overflows, so the scaler backs off in its first steps.")
    )
search_question = (
    f"The ablation starts the scale at {scale_label(ABLATION_INIT_EXPONENT)}. A step overflows while its largest "
    "gradient times the scale reaches 65,520, and each overflow skips the step and halves the scale"
    + (f"; this model's largest gradient is {peak:.3g}" if largest is not None else "")
    + ". How many skips in a row will the run start with?"
)
st.markdown(
    f"""
The lab's ~980 steps (5 epochs of 196) are fewer than the 2000 good steps the scaler waits before it tries a higher
scale. To see it work, start it far too high, at **{scale_label(ABLATION_INIT_EXPONENT)}**, and let it try to grow
after only **{ABLATION_GROWTH_INTERVAL}** good steps: a real run of 32 steps of 8 synthetic images.
"""
)
ablations = [(label, r) for label, r in runs if not r.config.default_scaler]
defaults = [(label, r) for label, r in runs if r.config.default_scaler]

jobs.queue_or_follow(ABLATION_KEY, "Run the scaler ablation", server_bundle.offer().scaler_ablation(),
                     failed="The ablation did not finish", before=before_the_ablation)
if ablations:
    label, ablation = ablations[0]
    shown = {f"ablation: {scaler_name(ablation.config)}": (ablation.loss_scale_history, ablation.skipped_step_numbers)}
    if defaults:
        default = defaults[0][1]
        shown[f"default: {scaler_name(default.config)}"] = (default.loss_scale_history, default.skipped_step_numbers)
    st.altair_chart(scale_traces_chart(shown, "Real GradScaler histories"), width="stretch")
    skipped = ablation.skipped_step_numbers
    start = ablation.config.loss_scale_init
    scales = [start] + [point["scale"] for point in ablation.loss_scale_history]
    backoffs = sum(1 for before, after in pairwise(scales) if after < before)
    growths = sum(1 for before, after in pairwise(scales) if after > before)
    kinds = classify_skips(start, ablation.loss_scale_history, skipped)
    expected = search_skips(peak, start) if largest is not None else None
    predict_then_check(
        "search-skips", search_question, low=0, high=16, default=2, step=1, fmt="%d", answer=len(kinds.search),
        why=None if expected is None else (
            f"{peak:.3g} × {start:,.0f} = {peak * start:,.0f}, and each halving brings it closer to 65,520: "
            f"{expected} halvings get it under, which is what the capture predicts. The run measured "
            f"{len(kinds.search)}" + (": the same." if expected == len(kinds.search) else
                                      ": its first batches (8 synthetic images) had gradients of another size than "
                                      "the capture's.")),
    )
    causes = [(f"{len(kinds.search)} in a row at the start, the search down from {start:,.0f} to a scale where "
               "every gradient fits")] if kinds.search else []
    if kinds.probes:
        causes.append(f"{len(kinds.probes)} right after the scale grew: the higher scale overflowed and was undone")
    if kinds.larger:
        causes.append(f"{len(kinds.larger)} at a scale that had been working: a larger gradient than before "
                      "overflowed it")
    st.markdown(
        f"From {label}: **{len(skipped)}** of {ablation.total_steps} steps skipped (steps "
        f"{', '.join(map(str, skipped[:20]))}{' ...' if len(skipped) > 20 else ''}); the scale was halved "
        f"{times(backoffs)} and doubled {times(growths)}. Of the skips, " + "; ".join(causes or ["none"]) + ". It ends "
        f"at {scales[-1]:,.0f}" + ("." if not defaults else ", while the default's line stays flat at 65,536.")
    )
    if not defaults:
        st.caption("A finished amp-fp16 run with the default scaler (a comparison from the Run page, or the tiny run "
                   "above) draws the default's flat line beside it.")

st.page_link("pages/safeguards.py", label="Watch a run without its scaler: AMP without its safeguards", icon="🧯")

with st.expander("Deeper: simulate the scaler with your own settings"):
    st.markdown(
        "Change the scaler's settings and the gradients it meets, and watch the scale it ends up using. A step "
        f"overflows when its largest gradient times the current scale reaches {FP16_OVERFLOW}, which rounds to inf "
        "in fp16."
    )
    left, right = st.columns(2)
    init_exponent = left.select_slider("Initial scale", options=list(range(MAX_SCALE_EXPONENT + 1)), value=16,
                                       format_func=scale_label)
    growth_factor = left.number_input("Growth factor", min_value=1.1, max_value=16.0, value=2.0, step=0.5)
    backoff_factor = left.number_input("Backoff factor", min_value=0.05, max_value=0.95, value=0.5, step=0.05)
    growth_interval = left.number_input("Growth interval (good steps before growing)", min_value=1, max_value=5000,
                                        value=100, step=10,
                                        help="PyTorch's default is 2000; 100 shows growth in a short trace.")
    steps = right.slider("Steps", min_value=20, max_value=2000, value=400, step=20)
    grad_exponent = right.select_slider("Largest |gradient| in a step (before scaling)",
                                        options=list(range(-12, 9)), value=1,
                                        format_func=lambda k: f"2^{k} = {2.0**k:g}")
    spikes_text = right.text_input("Extra steps with inf/NaN gradients", value="250",
                                   help="A bad batch or a loss spike; write steps like 3, 10-12, 40.")
    if largest is not None:
        st.caption(f"The lab model's largest weight gradient in the capture above was {largest['weight']:.3g}.")
    try:
        spikes = parse_steps(spikes_text, steps)
        trace = simulate_gradients(
            [2.0**grad_exponent] * steps,
            ScalerSettings(float(2**init_exponent), float(growth_factor), float(backoff_factor), int(growth_interval)),
            extra_inf_steps=spikes,
        )
    except TrainerError as err:
        st.error(str(err))
    else:
        points = [{"step": s.step, "scale": s.scale_used} for s in trace.steps]
        st.altair_chart(scale_trace_chart(points, trace.skipped_steps,
                                          "Simulated loss scale (the scale each step used)"), width="stretch")
        skipped = trace.skipped_steps
        early = [s for s in skipped if s not in spikes]
        st.markdown(
            f"**{len(skipped)}** of {steps} steps skipped"
            + (f"; {len(early)} of them because the scale was too high for these gradients" if early else "")
            + f". Final scale: {trace.scales_after[-1]:,.0f}."
        )
        st.caption(
            "After every growth interval the scaler tries a scale growth-factor times higher; if that overflows, the "
            "step is skipped and the scale drops back. These periodic probes keep the scale as high as the gradients "
            "allow."
        )

next_link("pages/memory.py", "where the memory goes")
