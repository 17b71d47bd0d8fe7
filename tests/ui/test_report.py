"""The lab report: one HTML file that holds a learner's comparisons, charts as inline SVG, their deliberate failures,
every job and their predictions beside the answers, and loads nothing."""

import re
import time
from html.parser import HTMLParser

import pytest

from server.guesses import Guess
from tests.ui_fixtures import counted_result, finished_job, lab_pair, make_result
from ui import report
from ui.report import lab_report


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text outside tags."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parsed(document: str) -> Tags:
    tags = Tags()
    tags.feed(document)
    return tags


def learners_work():
    baseline, candidate = lab_pair()
    candidate.timing_quality = {"verdict": "noisy", "cv": 0.3, "reasons": ["other processes used 68% of the CPU"]}
    baseline.timing_quality = {"verdict": "steady", "cv": 0.02, "reasons": []}
    now = time.time()
    comparison = finished_job("cmp-1", [baseline, candidate], "fp32 vs amp-fp16, 2 epochs", created_at=now - 60)
    pair = finished_job("pair-1", [counted_result("amp-fp16", 300, 0, 1.9, loss_shrink_log2=16),
                                   counted_result("amp-fp16-unscaled", 950, 0, 2.29, loss_shrink_log2=16)],
                        "deliberate failure, without the GradScaler", purpose="safeguards", created_at=now)
    failed = finished_job("run-9", [make_result("amp-bf16")], "a single run", kind="run", created_at=now - 120)
    failed.status, failed.error, failed.outcomes = "failed", "the run ran out of memory at batch 8192", []
    guesses = [Guess("run-speedup", "How many times as fast will AMP train?", 1.5, now, "%.2fx", 75 / 48, now),
               Guess("memory", "How much less memory <at batch 256>?", None, now, "%.0f%%")]
    return [comparison, pair, failed], guesses


@pytest.mark.slow
def test_the_report_holds_the_runs_the_charts_as_svg_and_the_predictions_and_loads_nothing():
    jobs, guesses = learners_work()
    document = lab_report("ada <b>", jobs, guesses, server="room 4", generated_at=0)
    tags = parsed(document)
    names = [tag for tag, _ in tags.tags]
    assert names.count("svg") == 5  # the comparison's time, memory, throughput and loss; the pair's zero gradients
    assert "script" not in names and "img" not in names and "link" not in names and "iframe" not in names
    loads = [value for _, attrs in tags.tags for key, value in attrs.items() if key in ("src", "href", "xlink:href")]
    assert loads == []  # nothing to fetch: it opens offline
    text = " ".join(" ".join(tags.text).split())
    assert "AMP Lab report: ada <b>" in text and "Made 1970-01-01 00:00 UTC on room 4" in text  # escaped, as text
    assert "How many times as fast will AMP train? 1.50x 1.56x" in text  # the guess beside the revealed answer
    assert "How much less memory <at batch 256>? skipped not revealed yet" in text
    assert "Training time (2 epochs) 75.0 s 48.0 s 1.56x faster" in text  # the lab's table from the runs
    assert ("Timing quality: 1 of the 2 runs (AMP (fp16)) was timed while other work shared the machine: other "
            "processes used 68% of the CPU." in text)
    assert "underflow zeroed about 65.0% of them" in text and "deliberate failure" in text
    assert "the run ran out of memory at batch 8192" in text  # a failed job is listed with its error
    assert re.search(r"device_name\s+Test CPU", text)


def test_a_chart_that_cannot_be_drawn_leaves_a_line_and_the_rest_of_the_report(monkeypatch):
    def refuse(chart):
        raise RuntimeError("no vl-convert here")

    monkeypatch.setattr(report, "chart_svg", refuse)
    jobs, guesses = learners_work()
    text = " ".join(" ".join(parsed(lab_report("ada", jobs, guesses)).text).split())
    assert text.count("A chart could not be drawn here (RuntimeError: no vl-convert here).") == 5
    assert "Training time (2 epochs) 75.0 s 48.0 s" in text


def test_a_learner_with_nothing_yet_gets_a_report_that_says_so():
    text = " ".join(" ".join(parsed(lab_report("bob", [], [])).text).split())
    assert "No prediction locked yet." in text and "No comparison finished yet." in text
    assert "No job queued yet." in text


def test_only_the_newest_comparisons_are_drawn_in_full(monkeypatch):
    monkeypatch.setattr(report, "chart_svg", lambda chart: "<svg></svg>")
    baseline, candidate = lab_pair()
    jobs = [finished_job(f"cmp-{index}", [baseline, candidate], f"comparison {index}", created_at=float(index))
            for index in range(report.REPORT_COMPARISONS + 2)]
    document = lab_report("ada", jobs, [])
    drawn = re.findall(r"<h3>comparison (\d+)</h3>", document)
    assert drawn == [str(index) for index in range(report.REPORT_COMPARISONS + 1, 1, -1)]  # newest first
    assert "comparison 0" in document  # the oldest is still in the list of every job
