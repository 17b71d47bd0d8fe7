"""Streamlit pieces that several pages draw: the hardware summary, a job's progress in words, a full comparison."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import streamlit as st

from lessons.amp_step import PAGE_PARTS, highlight_sentence
from lessons.interpret import interpret, loss_tracking
from lessons.roofline import roofline_rows, roofline_sentence, roofline_steps
from lessons.step_budget import (
    PUBLISHED_PEAKS,
    PUBLISHED_SOURCE,
    budget_rows,
    budget_sentence,
    peaks_provenance,
    profile_beside_steady,
    run_budget,
)
from lessons.verdicts import distinct_warnings, headline, timing_summary
from server.devices import Slot
from server.instructor import Capacity
from server.records import JobView
from server.settings import Settings
from trainer.comparison_table import format_seconds, lab_differences
from trainer.environment import HardwareReport
from trainer.peaks import DevicePeaks, stored_peaks
from trainer.results import LAB_REFERENCE, RunResult
from ui import charts, server_bundle
from ui.charts import run_names
from ui.learn_charts import amp_step_chart, ladder_chart, roofline_chart
from ui.reference import newest_ladders, this_machine_class

RESULTS_PAGE = "pages/results.py"
RUN_PAGE = "pages/run_experiment.py"
PHASE_NAMES = {
    "starting": "starting",
    "loading data": "loading the data",
    "evaluating": "checking accuracy on the test images",
    "done": "wrapping up",
}


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def hardware_panel(report: HardwareReport) -> None:
    """The device the jobs run on, what it offers for mixed precision, and the gain to expect."""
    st.markdown(f"**Device:** {report.device_name} ({report.device_type.upper()})")
    columns = st.columns(4)
    columns[0].metric("Tensor Cores", yes_no(report.tensor_cores))
    columns[1].metric("Native bf16 on the GPU", yes_no(report.native_bf16))
    columns[2].metric("CPU bf16 instructions", yes_no(report.cpu_bf16))
    columns[3].metric("CPU AMX tile units", yes_no(report.cpu_amx))
    st.info(f"**What to expect here:** {report.expected_gain}")
    for note in report.notes:
        st.caption(note)


def about(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"about {format_seconds(max(0.0, seconds))}"


def run_progress_text(job: JobView, index: int) -> tuple[float, str]:
    """The progress bar's fill and caption for run `index` of a job."""
    if index < len(job.outcomes):
        outcome = job.outcomes[index]
        if outcome.status == "ok" and outcome.result is not None:
            return 1.0, f"finished: {format_seconds(outcome.result.total_time_s)} of training"
        return 1.0, f"{outcome.status}: {outcome.error or 'no message'}"
    if job.status != "running" or index != job.current_run:
        return 0.0, "waiting for its turn" if job.status in ("queued", "running") else "not run"
    progress = job.progress
    if progress is None:
        return 0.0, "starting a fresh Python process"
    if progress.phase != "training" or not progress.total_steps:
        return progress.fraction_done, PHASE_NAMES.get(progress.phase, progress.phase)
    parts = [f"epoch {progress.epoch}/{progress.epochs}", f"batch {progress.step}/{progress.steps_per_epoch}"]
    if progress.images_per_s:
        parts.append(f"{progress.images_per_s:,.0f} images/s")
    if progress.eta_s is not None:
        parts.append(f"{about(progress.eta_s)} left")
    return progress.fraction_done, " · ".join(parts)


def live_losses(job: JobView) -> dict[str, Sequence[dict]]:
    """The loss points seen so far of each run that has some, under the run's own name: two fp32 runs stay apart."""
    return {name: points for name, points in zip(run_names(job.spec), job.live_losses) if points}


def capacity_sentences(at_start: Capacity | None, start_label: str, recent_per_hour: float | None,
                       workers: int) -> list[str]:
    """The console's capacity in words: at the Run page's starting settings (what the room is set up to run), and
    as the class's recent comparisons actually ran (which may have been much smaller or larger)."""
    serving = f"on its {workers} worker{'s' if workers != 1 else ''}, one comparison each"
    lines = []
    if at_start is None:
        lines.append(f"At the Run page's starting settings ({start_label}) there is no estimate for this device yet.")
    else:
        source = ("estimated from this server's own runs of those modes" if at_start.from_history else
                  "a coarse estimate for this kind of device, right to within a few times, until this server has "
                  "run those modes")
        lines.append(f"At the Run page's starting settings ({start_label}), one comparison takes "
                     f"{about(at_start.comparison_s)} ({source}): about **{per_hour(at_start.learners_per_hour)} "
                     f"learners per hour** {serving}.")
    if recent_per_hour is None:
        lines.append("No comparison has finished on this server yet, so there is no measured capacity.")
    else:
        lines.append(f"As the class's recent comparisons ran here, with their own settings: about "
                     f"{per_hour(recent_per_hour)} learners per hour {serving} (queue waits left out).")
    return lines


def per_hour(rate: float) -> str:
    """A rate per hour as a person says it: one decimal below 10 (0.8 learners), whole numbers above."""
    return f"{rate:.1f}" if rate < 10 else f"{rate:,.0f}"


# A Ray cluster whose GPU (or, on CPUs, every) node has left: the queue waits for one to join.
NO_WORKER = "the cluster it runs jobs on has no GPU (or node) for the class, so jobs wait until one joins."


def waiting_line(position: int | None, wait_s: float | None, workers: int, paused: bool) -> str:
    """Where a waiting job stands, and why it has not started when a worker is not what it waits for."""
    where = f"Waiting in the queue at position {position}"
    if paused:
        return f"{where}: the instructor has paused the queue; it starts once they resume it."
    if not workers:
        return f"{where}: {NO_WORKER}"
    if wait_s is None:
        return f"{where}; when it starts depends on jobs ahead whose length cannot be estimated yet."
    return f"{where}; it should start in {about(wait_s)}."


def settings_rows(settings: Settings) -> list[dict]:
    """The server's settings as the console shows them: today's limits beside the presets (a secret only as set or
    not)."""
    empty = {"gpus": "all", "max_queued_total": "none", "max_subset": "none"}

    def shown(name: str, value) -> str:
        if value is None or value == "":
            return empty.get(name, "(empty)")
        return ", ".join(map(str, value)) if isinstance(value, list) else str(value)

    return [{"setting": name, "value": shown(name, value), "variable": var, "meaning": meaning}
            for name, var, value, meaning in settings.describe()]


def queue_caption(views: Sequence[JobView], slots: Sequence[Slot], wait_s: float | None, paused: bool = False) -> str:
    """The instructor's live queue in one line: the server's workers (one per device, `slots`) and the jobs running
    on them now, the jobs waiting (`views`, the job manager's queue), and when a job submitted now would start (not
    while the queue is paused: then it waits for the resume)."""
    running = sum(view.status == "running" for view in views)
    waiting = len(views) - running
    if not slots:
        return (f"This server has no worker now: {NO_WORKER} {running} job{'s' if running != 1 else ''} running, "
                f"{waiting} waiting.")
    workers = ", ".join(slot.label for slot in slots)
    start = ("the queue is paused, so a job submitted now starts only once you resume it" if paused else
             "when a job submitted now would start cannot be estimated yet" if wait_s is None else
             f"a job submitted now would start in {about(wait_s)}")
    return (f"This server has {len(slots)} worker{'s' if len(slots) != 1 else ''} ({workers}): "
            f"{running} job{'s' if running != 1 else ''} running now, {waiting} waiting; {start}.")


def comparison_summary(runs: Mapping[str, RunResult], key: str, with_lab_reference: bool = False) -> None:
    """The lab's table computed from two runs (the first is the baseline; with repeated pairs, the pair with the
    median speedup), a sentence explaining it with the speedup's interval and any run's timing caveats, warnings."""
    found = headline(list(runs.values()))
    interval, baseline, candidate = found.interval, found.baseline, found.candidate
    table = charts.comparison_table(baseline, candidate, interval)
    if with_lab_reference:
        # One above the other: side by side, the two four-column tables were cut at 800 px.
        st.markdown("**Your runs, on this server**")
        st.table(table, hide_index=True)
        st.markdown("**The lab's reference figures** (not your run)")
        st.table(charts.lab_reference_table(), hide_index=True)
        st.caption(f"From {LAB_REFERENCE['source']}: a different machine, shown only for orientation.")
        differs = lab_differences(baseline, candidate)
        st.caption("**Yours beside the lab's:** " + "; ".join(differs) + ".")
    else:
        st.table(table, hide_index=True)
    st.markdown(f"**What this says:** {interpret(baseline, candidate, interval, runs=list(runs.values()))}")
    st.caption(f"**Speedup:** {interval.describe()}.")
    if noisy := timing_summary(runs):
        st.warning(noisy)
    for warning in distinct_warnings(runs):
        st.warning(warning)


def comparison_charts(runs: Mapping[str, RunResult], key: str) -> None:
    """Time, memory, time per epoch, throughput and loss, each chart with tooltips."""
    left, right = st.columns(2)
    left.altair_chart(charts.time_chart(runs), width="stretch", key=f"{key}-time")
    right.altair_chart(charts.memory_chart(runs), width="stretch", key=f"{key}-memory")
    left.altair_chart(charts.epoch_time_chart(runs), width="stretch", key=f"{key}-epochs")
    right.altair_chart(charts.throughput_chart(runs), width="stretch", key=f"{key}-throughput")
    loss = charts.loss_chart(charts.loss_series(runs), precisions=charts.run_precisions(runs))
    st.altair_chart(loss, width="stretch", key=f"{key}-loss")
    found = headline(list(runs.values()))
    if found is not None and (tracking := loss_tracking(found.baseline, found.candidate)):
        st.caption(tracking)


def when(stamp: float | str | None) -> str:
    """A time as every page shows one, to the minute in UTC with the zone said: '2026-12-01 02:10 UTC'; '-' when
    unknown. `stamp` is epoch seconds (a job's times) or ISO 8601 (a result's started_at; without a zone, UTC)."""
    # UTC rather than the server's local time: learners and the server need not share a zone, and the class CSV
    # and the results' own records are in UTC too.
    if stamp is None or stamp == "":
        return "-"
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp)
        except ValueError:
            return "-"
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    else:
        moment = datetime.fromtimestamp(stamp, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def next_link(page: str, label: str) -> None:
    """The learn pages' last line: a divider and a link to the next page of the walkthrough."""
    st.divider()
    st.page_link(page, label=f"Next: {label}", icon="➡️")


def step_budget_panel(runs: Mapping[str, RunResult]) -> None:
    """The comparison's median pair against this device's measured peaks (lessons/step_budget.py): the sentence,
    the table, and where the peaks come from."""
    found = headline(list(runs.values()))
    named = {label: result for label, result in runs.items() if result in (found.baseline, found.candidate)}
    measured = next((result.device_peaks for result in named.values() if result.device_peaks), None)
    if measured is None:
        st.caption("These runs did not measure this device's peak rates (a comparison from before they were): run "
                   "a comparison again to see its step budget.")
        return
    peaks = DevicePeaks.from_dict(measured)
    budgets = [budget for label, result in named.items() if (budget := run_budget(label, result, peaks))]
    if not budgets:
        st.caption("No steady step time was measured (the runs ended within their warm-up), so there is no budget.")
        return
    st.markdown(budget_sentence(budgets))
    st.table(budget_rows(budgets), hide_index=True)
    st.caption(peaks_provenance(peaks, found.baseline.environment.get("device_name") or ""))


def amp_step_picture(page: str) -> None:
    """The one picture of an AMP step, with the parts `page` (its file name in pages/) is about highlighted."""
    st.altair_chart(amp_step_chart(PAGE_PARTS[page]), width="stretch", key=f"amp-step-{page}")
    st.caption(highlight_sentence(page))


MODE_COLUMNS = {"fp32 as the lab ran it": "lab's fp32"}  # the roofline table's short header for the widest name


def roofline_panel(width: int = 1, batch_size: int = 256) -> None:
    """The lab's model on a roofline: an H200's published peaks, or any device this server has measured (its
    comparisons record them); the chart, the per-layer table and what the two bounds add up to."""
    h200 = PUBLISHED_PEAKS["H200 SXM"]
    devices = {f"NVIDIA H200 SXM, published ({PUBLISHED_SOURCE})": (
        {dtype: rate for dtype, rate in h200.items() if dtype != "gb_per_s"}, h200["gb_per_s"])}
    for measured in stored_peaks(server_bundle.settings().peaks_cache_path):
        if measured.copy_gb_per_s and {"fp32", "bf16"} <= set(measured.matmul_tflops):
            devices[f"{measured.device_name}, measured here (torch {measured.torch_version})"] = (
                measured.matmul_tflops, measured.copy_gb_per_s)
    # The H200 first, as the page's budget above: a device the server measures meanwhile does not flip the view.
    chosen = st.selectbox("Device", list(devices), index=0, key="roofline-device")
    tflops, gb_per_s = devices[chosen]
    st.altair_chart(roofline_chart(width, batch_size, tflops, gb_per_s), width="stretch", key="roofline")
    steps = roofline_steps(width, batch_size, tflops, gb_per_s)
    # Bytes in one cell ("fp32 / AMP") and a short time column per mode: seven columns fit an 800 px window.
    st.table([{"layer": row["layer"], "GFLOP": row["GFLOP"],
               "MB, fp32 / AMP": f"{row['MB, fp32']:,.1f} / {row['MB, AMP']:,.1f}",
               **{MODE_COLUMNS.get(mode, mode): row[f"time, {mode}"] for mode in steps}}
              for row in roofline_rows(steps)], hide_index=True)
    st.markdown(roofline_sentence(steps))
    st.caption("Each time is the slower of the layer's arithmetic and its bytes at these peaks (the chart's tooltips "
               "say which). A device without TF32 (a CPU) has strict fp32 and AMP only.")


def profile_panel(runs: Mapping[str, RunResult]) -> None:
    """The profiled runs' steps by kind of work, what changed most between the first two, and on CUDA the kernels
    that ran (those whose names show Tensor Cores marked). Nothing when no run was profiled."""
    profiled = {label: result for label, result in runs.items() if result.profile}
    if not profiled:
        st.caption("These runs were not profiled: tick *Profile a short window* on the Run page to see a step by "
                   "kind of work.")
        return
    st.altair_chart(charts.profile_chart(profiled), width="stretch", key="profile")
    if len(profiled) >= 2:
        (first, a), (second, b) = list(profiled.items())[:2]
        changes = sorted(((name, a.profile["categories"][name], b.profile["categories"].get(name, 0.0))
                          for name in a.profile["categories"]), key=lambda c: abs(c[1] - c[2]), reverse=True)
        said = "; ".join(f"{name} {before * 1e3:,.1f} → {after * 1e3:,.1f} ms" for name, before, after in changes[:3])
        st.markdown(f"From {first} to {second}, per step, the largest changes: {said}.")
    first = next(iter(profiled.values())).profile
    st.caption(f"{first['steps']} steps per run under torch.profiler, after the timed training and the accuracy "
               "check (which it does not change); each operator with everything it called. Host time not covered "
               "by operators is Python and the loop's own bookkeeping.")
    for label, result in profiled.items():
        beside = profile_beside_steady(result)
        if beside and beside.endswith("the step the run timed."):
            st.caption(f"{label}: {beside}")
        elif beside:
            st.warning(f"{label}: {beside}")
    kernels = [(label, kernel) for label, result in profiled.items() for kernel in result.profile.get("kernels", [])]
    if kernels:
        with st.expander("GPU kernels that ran (likely Tensor Core work marked, by the math type a name spells)"):
            st.dataframe([{"run": label, "kernel": k["name"], "ms per step": round(k["s"] * 1e3, 3),
                           "likely Tensor Core": "yes" if k["tensor_cores"] else ""} for label, k in kernels],
                         hide_index=True)


def ladder_panel() -> None:
    """The newest ladder recorded on this server's class of machine (reference/ladder-*.json): its chart, each
    rung's figures, the rungs not run and why."""
    ladders = newest_ladders()
    if not ladders:
        st.info(f"No ladder has been recorded on {this_machine_class()} yet: `python -m bench.ladder --quick --json "
                "reference/ladder-<device>-<date>-quick.json` on such a machine records one.")
        return
    for number, report in enumerate(ladders):
        st.altair_chart(ladder_chart(report), width="stretch", key=f"ladder-{number}")
        # Text cells: a column with a missing value is a float column, which st.table prints as "2,460.0000".
        st.table([{"rung": rung["name"], "images/s": "" if rung["images_per_s"] is None else
                       f"{rung['images_per_s']:,.0f}", "x the lab's loop": "" if not rung["speedup_vs_lab"] else
                       f"{rung['speedup_vs_lab']['median']:.2f}x", "accuracy": "" if rung["test_accuracy"] is None
                       else f"{rung['test_accuracy']:.1%}", "noisy runs": rung.get("noisy_runs", 0),
                       "not run because": rung["why_not"] or ""}
                      for rung in report["rungs"]], hide_index=True)
        st.caption(ladder_caption(report))


def ladder_caption(report: dict) -> str:
    """Where and how a ladder was recorded: the device, the workload, and the rounds that ran of those planned
    (a budget can cut the later ones; the last rung, the largest batch, runs once)."""
    size = "a quick ladder: 1 epoch of 2,048 synthetic images" if report.get("quick") else "the lab's workload"
    rounds = max((len(rung["seconds"]) for rung in report["rungs"][:-1]), default=0)
    speed = {rung["name"]: (rung["speedup_vs_lab"] or {}).get("median") for rung in report["rungs"]}
    compiled, eager = speed.get("torch.compile"), speed.get("channels_last")
    slower = (" torch.compile ran slower here than the eager rung before it: on a CPU it swaps PyTorch's own "
              "pooling, activation and cast kernels for C++ it generates, and a profile of this model on a 2-core "
              "EPYC put the gap there: 4x the time of eager's kernels, while the convolutions and matrix products "
              "are the same library calls in both (bench/README.md, the ladder)."
              if report.get("device") == "cpu" and compiled and eager and compiled < eager else "")
    return (f"Recorded on {report['device_name']} (torch {report['torch']}), {size}, {rounds} of "
            f"{report['repeats']} rounds over the rungs; {report['file']}. "
            + ("The lab's 75 s and airbench's published times (other people's figures, on their GPUs) are "
               "dashed lines." if not report.get("quick") else "Too short a workload to set beside the lab's "
               "75 s or airbench's published times.") + slower)
