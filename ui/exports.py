"""What the download buttons hand out: runs as JSON, a one-row-per-run CSV, and the loss history as CSV."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

import pandas as pd

from lessons.verdicts import ClassRow, class_row, headline
from server.guesses import Guess
from server.identity import RosterEntry
from server.kinds import PAGE_KINDS
from server.records import JobView
from trainer.results import RunResult, compare, speedup_interval, split_pairs

CONFIG_COLUMNS = ("precision", "epochs", "batch_size", "data", "subset", "loader", "width", "channels_last")


def runs_json(runs: Mapping[str, RunResult], job_id: str | None = None) -> str:
    """Every run in full; the speedup's median and range over the pairs (None without a pair), as Results heads the
    page with it; and each pair's comparison, its candidate against its own baseline, in the order they ran."""
    baselines, candidates = split_pairs(list(runs.values()))
    interval = speedup_interval(baselines, candidates)
    payload = {
        "job_id": job_id,
        "runs": [{"label": label, **result.to_dict()} for label, result in runs.items()],
        "speedup": None if interval is None else interval.to_dict(),
        "comparisons": [compare(baseline, candidate).to_dict() for baseline, candidate in zip(baselines, candidates)],
    }
    return json.dumps(payload, indent=2)


def runs_frame(runs: Mapping[str, RunResult]) -> pd.DataFrame:
    """One row per run with its settings and main figures (memory in bytes, one column per figure)."""
    memory_keys = list(dict.fromkeys(key for result in runs.values() for key in result.peak_memory))
    rows = []
    for label, result in runs.items():
        row = {"run": label}
        row.update({key: getattr(result.config, key) for key in CONFIG_COLUMNS})
        row.update(
            device=result.environment.get("device_name"),
            total_time_s=result.total_time_s,
            steady_images_per_s=result.steady_images_per_s,
            test_accuracy=result.test_accuracy,
            skipped_steps=result.skipped_steps,
            data_wait_s=result.data_wait_s,
            compute_s=result.compute_s,
        )
        row.update({f"peak_{key}_bytes": result.peak_memory.get(key) for key in memory_keys})
        rows.append(row)
    return pd.DataFrame(rows)


def loss_frame(runs: Mapping[str, RunResult]) -> pd.DataFrame:
    """The logged training loss of every run, one row per point."""
    rows = [
        {"run": label, "precision": result.precision, "step": p["step"], "epoch": p.get("epoch"), "loss": p["loss"]}
        for label, result in runs.items()
        for p in result.loss_history
    ]
    return pd.DataFrame(rows, columns=["run", "precision", "step", "epoch", "loss"])


def to_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False)


def class_rows(jobs: Sequence[JobView], names: Mapping[str, str]) -> list[ClassRow]:
    """The console's row for each of the class's latest comparisons (`jobs`, one a learner; `names` by id)."""
    rows = [class_row(names.get(job.learner_id, "a learner"), job.finished_at or job.created_at, job.id, job.results)
            for job in jobs]
    return [row for row in rows if row is not None]


def class_frame(rows: Sequence[ClassRow]) -> pd.DataFrame:
    """The class's latest comparisons, one learner a row, in plain units (for the console and its CSV); a speedup
    over repeated pairs is their median, with the lowest and highest pair's (empty for one pair)."""
    return pd.DataFrame(
        [
            {
                "learner": row.learner,
                "finished (UTC)": datetime.fromtimestamp(row.when, timezone.utc).strftime("%Y-%m-%d %H:%M"),
                "device": row.device,
                "baseline": row.baseline,
                "compared": row.candidate,
                "speedup (x)": _rounded(row.speedup),
                "lowest speedup (x)": _rounded(row.speedup_low),
                "highest speedup (x)": _rounded(row.speedup_high),
                "pairs": row.pairs,
                "memory figure": row.memory_figure,
                "memory saved (%)": None if row.memory_saving_pct is None else round(row.memory_saving_pct, 1),
                "baseline accuracy (%)": _percent(row.baseline_accuracy),
                "compared accuracy (%)": _percent(row.candidate_accuracy),
                "job": row.job_id,
            }
            for row in rows
        ],
        columns=["learner", "finished (UTC)", "device", "baseline", "compared", "speedup (x)",
                 "lowest speedup (x)", "highest speedup (x)", "pairs", "memory figure", "memory saved (%)",
                 "baseline accuracy (%)", "compared accuracy (%)", "job"],
    )


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else round(100 * fraction, 1)


def _rounded(speedup: float | None) -> float | None:
    return None if speedup is None else round(speedup, 3)


def roster_frame(learners: Sequence[RosterEntry], counts: Mapping[str, Mapping[str, int]],
                 latest: Sequence[JobView], guesses: Mapping[str, Sequence[Guess]]) -> pd.DataFrame:
    """The instructor's gradeable roster, one learner a row: who they are, their jobs by kind, their latest
    comparison (settings, speedup with its range over pairs, whether the timing holds, accuracy), and each prediction
    they locked, the speedup's beside the speedup they measured."""
    by_learner = {job.learner_id: job for job in latest}
    questions = list(dict.fromkeys(guess.question_key for own in guesses.values() for guess in own))
    rows = []
    for learner in learners:
        job = by_learner.get(learner.id)
        found = headline(job.results) if job is not None else None
        row = {"learner": learner.display_name, "sign-in": learner.sign_in or "",
               "first seen (UTC)": _utc(learner.created_at)}
        row.update({name: counts.get(learner.id, {}).get(purpose, 0) for purpose, name in PAGE_KINDS.items()})
        row.update({
            "latest comparison": job.label if job is not None else "",
            "speedup (x)": _rounded(found.speedup) if found else None,
            "lowest speedup (x)": _rounded(found.interval.low) if found else None,
            "highest speedup (x)": _rounded(found.interval.high) if found else None,
            "pairs": found.interval.pairs if found else None,
            "timing": found.timing if found else "",
            "baseline accuracy (%)": _percent(found.baseline.test_accuracy) if found else None,
            "compared accuracy (%)": _percent(found.candidate.test_accuracy) if found else None,
        })
        own = {guess.question_key: guess for guess in guesses.get(learner.id, [])}
        for key in questions:
            guess = own.get(key)
            row[f"guess: {key}"] = ("" if guess is None else "skipped" if guess.value is None
                                    else round(guess.value, 3))
        row["job"] = job.id if job is not None else ""
        rows.append(row)
    return pd.DataFrame(rows)


def predictions_frame(learners: Sequence[RosterEntry], guesses: Mapping[str, Sequence[Guess]]) -> pd.DataFrame:
    """The class's predictions against results: one row per learner and question, the guess and the answer the
    page revealed beside it, each as the page showed it, and the raw values for a spreadsheet."""
    names = {learner.id: learner.display_name for learner in learners}
    rows = [
        {"learner": names.get(learner_id, "a learner"), "question": guess.question, "guess": guess.guess_shown,
         "measured": guess.answer_shown, "measured in": guess.answered_by, "guess value": guess.value,
         "measured value": guess.answer, "locked (UTC)": _utc(guess.locked_at)}
        for learner_id, own in guesses.items() for guess in own
    ]
    return pd.DataFrame(rows, columns=["learner", "question", "guess", "measured", "measured in", "guess value",
                                       "measured value", "locked (UTC)"])


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M")
