"""A learner's lab report: one self-contained HTML file to hand in. It holds their comparisons (the lab's table, the
sentence that explains it, the timing's quality, the charts as SVG, each run's settings and environment), their runs
without AMP's safeguards, every other job they queued, and each prediction they locked beside the answer the page
revealed. The charts are drawn to SVG by Altair's own saver (vl-convert-python); the file has no script and loads
nothing, so it opens offline. No Streamlit here: the Results page and the instructor's console both hand it out."""

from __future__ import annotations

import html
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import altair as alt
import pandas as pd

from lessons.interpret import interpret, loss_tracking
from lessons.safeguards import FAILURE_COUNTS, final_losses, pair_reading
from lessons.verdicts import distinct_warnings, headline, timing_summary
from server.guesses import Guess
from server.records import JOB_PURPOSES, JobView
from trainer.comparison_table import format_seconds, lab_differences
from trainer.results import LAB_REFERENCE, RunResult
from ui import charts
from ui.learn_charts import update_share_chart

REPORT_COMPARISONS = 10  # the newest comparisons in full; older ones are listed with the other jobs

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.3rem; margin-top: 2.2rem; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05rem; margin-top: 1.6rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } .note { color: #555; font-size: 0.9rem; }
.charts { display: flex; flex-wrap: wrap; gap: 1rem; } .charts figure { margin: 0; }
.failure { border-left: 4px solid #b279a2; padding-left: 0.8rem; }
"""


def chart_svg(chart: alt.TopLevelMixin) -> str:
    """`chart` as an SVG document, drawn by Altair's saver through vl-convert-python (no browser, no network)."""
    out = io.StringIO()
    chart.save(out, format="svg")
    return out.getvalue()


def lab_report(learner: str, jobs: Sequence[JobView], guesses: Sequence[Guess], *, server: str = "",
               generated_at: float | None = None) -> str:
    """The report of `learner` (a display name) from their jobs (any order) and their locked guesses."""
    stamp = datetime.now(UTC) if generated_at is None else datetime.fromtimestamp(generated_at, UTC)
    newest = sorted(jobs, key=lambda job: job.created_at, reverse=True)
    comparisons = [job for job in newest if _is_comparison(job)][:REPORT_COMPARISONS]
    failures = [job for job in newest if job.spec.purpose == "safeguards" and job.status == "done"]
    parts = [
        f"<h1>AMP Lab report: {_text(learner)}</h1>",
        f"<p class='note'>Made {stamp:%Y-%m-%d %H:%M} UTC{' on ' + _text(server) if server else ''}. "
        "Every figure below was measured by the learner's own runs on that server; the lab's reference figures are "
        "labelled as such. This file is self-contained: it loads nothing and runs no script.</p>",
        _predictions(guesses),
        "<h2>Comparisons</h2>",
    ]
    if not comparisons:
        parts.append("<p>No comparison finished yet.</p>")
    parts += [_comparison(job) for job in comparisons]
    if failures:
        parts.append("<h2>AMP without its safeguards (deliberate failures)</h2>")
        parts += [_failure(job) for job in failures]
    parts.append(_all_jobs(newest))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>AMP Lab report: {_text(learner)}"
            f"</title><style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def _is_comparison(job: JobView) -> bool:
    return job.kind == "compare" and job.spec.purpose != "safeguards" and job.status == "done" and \
        len(job.results) >= 2


def _predictions(guesses: Sequence[Guess]) -> str:
    if not guesses:
        return "<h2>Predictions</h2><p>No prediction locked yet.</p>"
    rows = [{"Question": guess.question, "Your guess": guess.guess_shown, "Measured": guess.answer_shown,
             "Measured in": guess.answered_by or "-",
             "Locked (UTC)": f"{datetime.fromtimestamp(guess.locked_at, UTC):%Y-%m-%d %H:%M}"} for guess in guesses]
    return ("<h2>Predictions</h2><p class='note'>Each guess was locked before its answer was shown; the answer is "
            "the one the page revealed beside it.</p>" + _table(pd.DataFrame(rows)))


def _comparison(job: JobView) -> str:
    runs = charts.named_results(job)
    found = headline(list(runs.values()))
    baseline, candidate, interval = found.baseline, found.candidate, found.interval
    differs = lab_differences(baseline, candidate)
    parts = [
        f"<h3>{_text(job.label)}</h3>",
        f"<p class='note'>Job {_text(job.id[:8])} · finished {_when(job.finished_at)} · device: "
        f"{_text(baseline.environment.get('device_name') or baseline.config.device)}</p>",
        f"<p><b>Speedup:</b> {_text(interval.describe())}. <b>Timing:</b> {_text(found.timing)}"
        + (f" ({_text(found.doubt.reason)})" if found.doubt else "") + ".</p>",
        "<p><b>The lab's table, from these runs:</b></p>",
        _table(charts.comparison_table(baseline, candidate, interval)),
        f"<p><b>What this says:</b> {_text(interpret(baseline, candidate, interval, runs=list(runs.values())))}</p>",
        "<p class='note'><b>Beside the lab's own comparison:</b> "
        + _text("; ".join(differs) + ".") + "</p>",
        _timing(runs),
        _charts(runs),
        f"<p class='note'>{_text(tracking)}</p>" if (tracking := loss_tracking(baseline, candidate)) else "",
        f"<details><summary>The lab's reference figures (not these runs; from {_text(LAB_REFERENCE['source'])})"
        f"</summary>{_table(charts.lab_reference_table())}</details>",
    ]
    parts += [_settings(label, result) for label, result in runs.items()]
    return "\n".join(parts)


def _timing(runs: dict[str, RunResult]) -> str:
    """One line on how steady the runs' timing was, as Results says it, and each run's warnings once."""
    if not any(result.timing_quality for result in runs.values()):
        line = "not measured (runs recorded before it was)."
    else:
        line = timing_summary(runs) or f"all {len(runs)} runs were timed steadily."
    warnings = "".join(f"<li>{_text(warning)}</li>" for warning in distinct_warnings(runs))
    return (f"<p class='note'><b>Timing quality:</b> {_text(line)}</p>"
            + (f"<ul class='note'>{warnings}</ul>" if warnings else ""))


def _charts(runs: dict[str, RunResult]) -> str:
    loss = charts.loss_chart(charts.loss_series(runs), precisions=charts.run_precisions(runs))
    built = [charts.time_chart(runs), charts.memory_chart(runs), charts.throughput_chart(runs), loss]
    return "<div class='charts'>" + "".join(_figure(chart) for chart in built) + "</div>"


def _figure(chart: alt.TopLevelMixin) -> str:
    """A chart as inline SVG; if it cannot be drawn, one line that says so, and the rest of the report stands."""
    try:
        return f"<figure>{chart_svg(chart)}</figure>"
    except Exception as err:  # noqa: BLE001 - vl-convert missing or a chart it refuses: the figures stay in the tables
        return f"<p class='note'>A chart could not be drawn here ({_text(type(err).__name__)}: {_text(err)}).</p>"


def _settings(label: str, result: RunResult) -> str:
    config = {key: value for key, value in result.config.to_dict().items() if key not in ("data_root",)}
    return (f"<details><summary>{_text(label)}: settings and environment</summary>"
            f"{_pairs(config)}{_pairs(result.environment)}</details>")


def _failure(job: JobView) -> str:
    runs = charts.named_results(job)
    results = list(runs.values())
    if len(results) < 2 or results[1].precision not in FAILURE_COUNTS:
        return f"<h3>{_text(job.label)}</h3><p>Fewer than two finished runs.</p>"
    guarded, failure = results[:2]
    field, name = FAILURE_COUNTS[failure.precision]
    reading = pair_reading(guarded, failure)
    parts = [f"<div class='failure'><h3>{_text(job.label)}</h3>",
             f"<p class='note'>Job {_text(job.id[:8])} · finished {_when(job.finished_at)}</p>",
             f"<p>{_text(reading.sentence)}</p>"]
    losses = final_losses(guarded, failure)
    if losses:
        parts.append(f"<p>The loss ended at {losses[1]:.3f} in {_text(failure.precision)} and at {losses[0]:.3f} in "
                     f"{_text(guarded.precision)}.</p>")
    series = {label: result.update_history for label, result in runs.items()}
    parts.append("<div class='charts'>" + _figure(update_share_chart(series, charts.run_modes(job.spec), field,
                                                                     name, name)) + "</div></div>")
    return "\n".join(parts)


def _all_jobs(jobs: Sequence[JobView]) -> str:
    if not jobs:
        return "<h2>Every job</h2><p>No job queued yet.</p>"
    rows = [{"Queued (UTC)": _when(job.created_at), "Job": job.label, "Kind": JOB_PURPOSES.get(job.spec.purpose,
                                                                                               job.spec.purpose),
             "Status": job.status, "Time": format_seconds(job.finished_at - job.started_at)
             if job.finished_at and job.started_at else "", "Error": job.error or ""} for job in jobs]
    return "<h2>Every job</h2>" + _table(pd.DataFrame(rows))


def _table(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, escape=True, border=0, na_rep="")


def _pairs(values: dict) -> str:
    rows = "".join(f"<tr><th>{_text(key)}</th><td>{_text(_plain(value))}</td></tr>" for key, value in values.items())
    return f"<table>{rows}</table>"


def _plain(value) -> str:
    return json.dumps(value) if isinstance(value, dict | list) else "" if value is None else str(value)


def _when(stamp: float | None) -> str:
    return "-" if not stamp else f"{datetime.fromtimestamp(stamp, UTC):%Y-%m-%d %H:%M}"


def _text(value) -> str:
    return html.escape(str(value))
