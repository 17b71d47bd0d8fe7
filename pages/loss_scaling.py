"""Underflow and loss scaling: the lab model's real gradients against fp16's range, and GradScaler's dynamics."""

from itertools import pairwise

import numpy as np
import streamlit as st

from lessons.capture import capture_values, default_source
from lessons.scaler_sim import ScalerSettings, classify_skips, parse_steps, simulate_gradients
from lessons.underflow import MAX_SCALE_EXPONENT, log2_histogram, safe_scale_exponents, scale_sweep
from server.offer import ABLATION_GROWTH_INTERVAL, ABLATION_INIT_EXPONENT
from trainer.errors import TrainerError
from ui import jobs, server_bundle
from ui.learn_charts import gradient_histogram_chart, scale_sweep_chart, scale_trace_chart, scale_traces_chart
from ui.predict import predict_then_check
from ui.widgets import amp_step_picture, next_link, when

GRADIENT_KINDS = {
    "weight gradients": "gradients",
    "activation gradients": "activation gradients",
}
TINY_RUN_KEY = "loss_scaling_tiny_job"
ABLATION_KEY = "loss_scaling_ablation_job"


@st.cache_data(show_spinner="Training the lab model for a few steps to read its gradients...", max_entries=4)
def gradient_views(source: str, data_root: str) -> dict:
    """Per kind of gradient: its log2 histogram, what every scale 2^0..2^24 does to it, and its largest |value|."""
    capture = capture_values(source=source, data_root=data_root)
    views = {}
    for label, kind in GRADIENT_KINDS.items():
        values = capture.all_values(kind)
        views[label] = {
            "bins": log2_histogram(values),
            "sweep": scale_sweep(values),
            "largest": float(np.abs(values).max()),
        }
    return views


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


st.title("Underflow and loss scaling")
amp_step_picture("loss_scaling")
st.markdown(
    """
Gradients are often tiny: each is a sum of many small contributions, divided by the batch size. fp16's smallest
normal number is 2^-14 (about 6e-5) and its smallest subnormal 2^-24 (about 6e-8); anything at or below half of
that rounds to **zero**. A gradient that becomes zero teaches the model nothing. **Loss scaling** multiplies the loss by
a factor S before the backward pass; by the chain rule every gradient is multiplied by S too, which lifts the small
ones into fp16's range. Before the optimizer step the gradients are divided by S again (in fp32). Too large an S,
though, pushes the big gradients to 65520 or more, which rounds to **inf** (fp16's largest number is 65504, and
65519 still rounds down to it).
"""
)

settings = server_bundle.settings()
source = default_source(settings.data_root)
try:
    views = gradient_views(source, settings.data_root)
except TrainerError as err:
    st.error(f"Could not read the lab model's gradients: {err}")
    st.stop()

st.subheader("The lab model's gradients against fp16")
which = st.radio("Gradients", list(GRADIENT_KINDS), horizontal=True,
                 help="Weight gradients are what the optimizer uses; activation gradients flow between layers "
                      "during the backward pass, and under AMP they are computed in fp16.")
exponent = st.select_slider("Loss scale S", options=list(range(MAX_SCALE_EXPONENT + 1)), value=0,
                            format_func=scale_label)
view = views[which]
outcome = view["sweep"][exponent]
first, second, third = st.columns(3)
first.metric("become zero in fp16", f"{outcome.underflow_fraction:.3%}", help=f"{outcome.underflow:,} values")
second.metric("only subnormal (fewer bits)", f"{outcome.subnormal_fraction:.2%}", help=f"{outcome.subnormal:,} values")
third.metric("overflow to inf", f"{outcome.overflow_fraction:.3%}", help=f"{outcome.overflow:,} values")
st.altair_chart(gradient_histogram_chart(view["bins"], exponent), width="stretch")
st.altair_chart(scale_sweep_chart(view["sweep"], exponent), width="stretch")
safe = safe_scale_exponents(view["sweep"])
if safe:
    st.markdown(
        f"Of the {outcome.nonzero:,} nonzero {which} from {source} data, the fewest are lost to underflow without "
        f"any overflowing at scales from {scale_label(safe[0])} to {scale_label(safe[-1])}. Multiplying by a power "
        "of two only changes the exponent, so scaling and unscaling add no rounding error of their own."
    )
else:
    st.markdown("Every scale up to 2^24 overflows some of these gradients: the scaler would keep backing off.")
peaks = {label: view["largest"] for label, view in views.items()}
first_to_overflow = max(peaks, key=peaks.get)
st.caption(
    f"In this capture the largest activation gradient is {peaks['activation gradients']:.3g} and the largest "
    f"weight gradient {peaks['weight gradients']:.3g}, so as S grows the {first_to_overflow} overflow first."
)

st.subheader("GradScaler in a real amp-fp16 run")
st.markdown(
    """
PyTorch's `torch.amp.GradScaler` picks S for you, step by step. It starts high (65536 = 2^16 by default) on
purpose: a scale that is too high shows itself at once, as inf or NaN in the gradients, while one that is too low
fails silently. When a step's gradients hold an inf or NaN, the scaler **skips that optimizer step** (the weights
do not change) and multiplies S by its backoff factor (0.5: it halves). After 2000 steps in a row without one, it
multiplies S by its growth factor (2: it doubles) to probe upward again. So if the
first steps of a run are skipped, the scaler is searching down from its deliberately high start for a scale where
the gradients fit; a handful of skipped steps out of thousands costs almost nothing.
"""
)
runs = amp_fp16_runs()
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
            f"stayed below 65520, and the scale grows only after {interval} good steps in a row"
            + (", more than this run took, so the line is flat." if result.total_steps < interval else ".")
            + " The ablation below makes the scaler work."
        )
else:
    st.info("No finished amp-fp16 run with a loss-scale history on this server yet.")
    tiny = jobs.remembered(TINY_RUN_KEY)
    if tiny is not None and not tiny.finished:
        jobs.follow(tiny.id)
    else:
        if tiny is not None and tiny.status != "done":
            st.error(f"The tiny run did not finish: {tiny.error}")
        jobs.forget(TINY_RUN_KEY)  # offer the button (again)
        device = server_bundle.job_manager().device_type
        if device == "cpu":
            st.caption("fp16 on this CPU is tens of times slower than fp32, so the tiny run uses 1,024 synthetic "
                       "images at batch 32: expect a minute or two.")
        if jobs.queue_button("Run a tiny amp-fp16 run", server_bundle.offer().tiny_fp16_run(), TINY_RUN_KEY):
            st.rerun()

st.subheader("The scaler at work: an ablation")
st.markdown(
    f"""
Why is the default line flat for this model? Its largest gradient, times 65536, stays below 65520 (the captured
gradients above show it: S = 2^16 overflows none of them), so the scaler never backs off; and the lab's ~980
steps (5 epochs of 196) are fewer than the 2000 good steps it waits before it tries a higher scale. To see it
work, start it far too high, at **2^{ABLATION_INIT_EXPONENT} = {2**ABLATION_INIT_EXPONENT:,}**, and let it try to
grow after only **{ABLATION_GROWTH_INTERVAL}** good steps: a real run of 32 steps of 8 synthetic images.
"""
)
ablations = [(label, r) for label, r in runs if not r.config.default_scaler]
defaults = [(label, r) for label, r in runs if r.config.default_scaler]
ablation_job = jobs.remembered(ABLATION_KEY)
if ablation_job is not None and not ablation_job.finished:
    jobs.follow(ablation_job.id)
else:
    if ablation_job is not None and ablation_job.status != "done":
        st.error(f"The ablation did not finish: {ablation_job.error}")
    jobs.forget(ABLATION_KEY)
    if not ablations:
        predict_then_check(
            "skipped-steps", "Of the ablation's 32 steps, how many will the scaler skip?",
            low=0, high=32, default=4, step=1, fmt="%d", answer=None,
            pending="Run the ablation to check.",
        )
    if server_bundle.job_manager().device_type == "cpu":
        st.caption("fp16 on this CPU is tens of times slower than fp32: the 256 images take tens of seconds.")
    if jobs.queue_button("Run the scaler ablation", server_bundle.offer().scaler_ablation(), ABLATION_KEY):
        st.rerun()
if ablations:
    label, ablation = ablations[0]
    shown = {f"ablation: {scaler_name(ablation.config)}": (ablation.loss_scale_history, ablation.skipped_step_numbers)}
    if defaults:
        default = defaults[0][1]
        shown[f"default: {scaler_name(default.config)}"] = (default.loss_scale_history, default.skipped_step_numbers)
    st.altair_chart(scale_traces_chart(shown, "Real GradScaler histories"), width="stretch")
    skipped = ablation.skipped_step_numbers
    predict_then_check(
        "skipped-steps", f"Of the ablation's {ablation.total_steps} steps, how many will the scaler skip?",
        low=0, high=ablation.total_steps, default=min(4, ablation.total_steps), step=1, fmt="%d",
        answer=len(skipped),
    )
    start = ablation.config.loss_scale_init
    scales = [start] + [point["scale"] for point in ablation.loss_scale_history]
    backoffs = sum(1 for before, after in pairwise(scales) if after < before)
    growths = sum(1 for before, after in pairwise(scales) if after > before)
    kinds = classify_skips(start, ablation.loss_scale_history, skipped)
    causes = [f"{len(kinds.search)} in a row at the start, the search down from {start:,.0f} to a scale where every "
              "gradient fits"] if kinds.search else []
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

st.subheader("Simulate the scaler")
st.markdown(
    "Change the scaler's settings and the gradients it meets, and watch the scale it ends up using. A step "
    "overflows when its largest gradient times the current scale reaches 65520, which rounds to inf in fp16."
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
grad_exponent = right.select_slider("Largest |gradient| in a step (before scaling)", options=list(range(-12, 9)),
                                    value=1, format_func=lambda k: f"2^{k} = {2.0**k:g}")
spikes_text = right.text_input("Extra steps with inf/NaN gradients", value="250",
                               help="A bad batch or a loss spike; write steps like 3, 10-12, 40.")
largest = views["weight gradients"]["largest"]
st.caption(f"The lab model's largest weight gradient in the capture above was {largest:.3g}.")
try:
    spikes = parse_steps(spikes_text, steps)
    trace = simulate_gradients(
        [2.0**grad_exponent] * steps,
        ScalerSettings(float(2**init_exponent), float(growth_factor), float(backoff_factor), int(growth_interval)),
        extra_inf_steps=spikes,
    )
except TrainerError as err:
    st.error(str(err))
    st.stop()
points = [{"step": s.step, "scale": s.scale_used} for s in trace.steps]
st.altair_chart(scale_trace_chart(points, trace.skipped_steps, "Simulated loss scale (the scale each step used)"),
                width="stretch")
skipped = trace.skipped_steps
early = [s for s in skipped if s not in spikes]
st.markdown(
    f"**{len(skipped)}** of {steps} steps skipped"
    + (f"; {len(early)} of them because the scale was too high for these gradients" if early else "")
    + f". Final scale: {trace.scales_after[-1]:,.0f}."
)
st.caption(
    "After every growth interval the scaler tries a scale growth-factor times higher; if that overflows, the step "
    "is skipped and the scale drops back. These periodic probes keep the scale as high as the gradients allow."
)

next_link("pages/memory.py", "where the memory goes")
