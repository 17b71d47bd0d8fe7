"""The session planner: which settings let every learner of a class run one comparison in the time there is.

From the number of learners, the minutes of the session and the server's workers, it tries the Run page's settings
from the lab's own (5 epochs of the whole split, the lab's DataLoader, batch 256) down to a one-epoch subset, each
estimated on this server (server/estimate.py: from its own past runs of those modes where it has some, else the
coarse table, and says which), and proposes the largest that fits with a margin, with the queue's forecast: when
the last learner's comparison ends if everyone queues at the start, their quick demo first where the class allows
one (the fair queue runs everyone's first job before anyone's second).

    python -m server.planner --learners 30 --minutes 120      # before class, from the server's settings and history
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass, replace

from server.estimate import job_estimate
from server.history import HistoryStore
from server.offer import BATCH_SIZES, ComparisonRequest, Offer
from server.presets import presets_text
from trainer.comparison_table import format_seconds
from trainer.errors import ConfigError, TrainerError

MARGIN = 0.8  # the forecast must end by 80% of the session: late joiners, a second try, a slow first run
EPOCH_STEPS = (5, 3, 2, 1)
SUBSET_STEPS = (None, 25_000, 10_000, 5_000, 2_048, 1_024, 512, 256)
LOADER_STEPS = ("dataloader", "resident")  # the lab's own first


@dataclass(frozen=True)
class Plan:
    """The settings proposed for a class, and what they cost on this server."""

    learners: int
    minutes: float
    workers: int
    request: ComparisonRequest  # where every Run page starts
    comparison_s: float  # one comparison at those settings, start-up and accuracy check included
    demo_s: float | None  # the quick demo, where the class allows one (None: it does not)
    forecast_s: float  # when the last learner's comparison ends, everyone queueing at the start
    from_history: bool  # every estimate from this server's own past runs (else partly the coarse table)

    @property
    def fits(self) -> bool:
        return self.forecast_s <= MARGIN * self.minutes * 60

    @property
    def presets(self) -> str:
        """The plan as the console's presets (a link's query)."""
        chosen = {"epochs": self.request.epochs, "batch_size": self.request.batch_size,
                  "subset": "all" if self.request.subset is None else self.request.subset,
                  "loader": self.request.loader, "precision": self.request.precision}
        return presets_text({name: str(value) for name, value in chosen.items()})

    def describe(self) -> list[str]:
        """The plan in sentences, for the console and the command line."""
        source = ("from this server's own runs of these modes" if self.from_history else
                  "a coarse estimate for this kind of device (right to within a few times) until this server has run "
                  "these modes")
        demo = "" if self.demo_s is None else f", after a quick demo of {format_seconds(self.demo_s)} each"
        verdict = ("fits" if self.fits else "does not fit") + f" {MARGIN:.0%} of the {self.minutes:g} minutes"
        return [
            f"Start every Run page at {self.request.describe()}: one comparison takes about "
            f"{format_seconds(self.comparison_s)} here ({source}).",
            f"{self.learners} learners on {self.workers} worker{'s' if self.workers != 1 else ''}, each running one "
            f"comparison{demo}: the last comparison should end about {format_seconds(self.forecast_s)} after "
            f"everyone queues, which {verdict}.",
        ]


def plan_session(offer: Offer, store: HistoryStore | None, learners: int, minutes: float, workers: int) -> Plan:
    """The largest workload (epochs x images, the lab's loader first) whose forecast fits MARGIN of the session
    within the instructor's limits; the smallest one tried when none fits. ConfigError for a class that cannot be
    planned (no learners, no time, no worker, or a device without any estimate)."""
    if learners < 1 or minutes <= 0 or workers < 1:
        raise ConfigError("a plan needs at least one learner, some minutes and one worker")
    demo_rule = offer.kinds.rule("quick-demo")
    demo_s = None
    if demo_rule.enabled:
        demo_s, _ = job_estimate(offer.quick_demo(), store, offer.device_type)
    plans = []
    for request in _candidates(offer):
        comparison_s, from_history = job_estimate(offer.comparison(request), store, offer.device_type)
        if comparison_s is None:
            continue
        jobs = [demo_s] * learners if demo_s else []
        forecast_s = _last_end(jobs + [comparison_s] * learners, workers)
        plans.append(Plan(learners, minutes, workers, request, comparison_s, demo_s, forecast_s, from_history))
    if not plans:
        raise ConfigError(f"no estimate exists for a comparison on this {offer.device_type}: run one first")
    fitting = [plan for plan in plans if plan.fits]
    return fitting[0] if fitting else plans[-1]


def _candidates(offer: Offer) -> list[ComparisonRequest]:
    """The Run page's settings from the lab's own down, largest workload first, within the instructor's limits."""
    base = ComparisonRequest(precision=offer.default_precision(), data=offer.default_data,
                             batch_size=min(256, offer.batch_sizes(BATCH_SIZES)[-1]))
    found = []
    for epochs in EPOCH_STEPS:
        for subset in SUBSET_STEPS:
            for loader in LOADER_STEPS:
                request = replace(base, epochs=epochs, subset=subset, loader=loader)
                try:
                    for run in offer.comparison(request).runs:
                        offer.check_limits(run)
                except ConfigError:
                    continue
                found.append(request)
    work = {request: request.epochs * (request.subset or 50_000) for request in found}
    return sorted(found, key=lambda request: (-work[request], LOADER_STEPS.index(request.loader)))


def _last_end(durations: list[float], workers: int) -> float:
    """When the last of `durations` ends, each given in order to the first worker that frees up."""
    free_at = [0.0] * workers
    end = 0.0
    for seconds in durations:
        start = heapq.heappop(free_at)
        end = max(end, start + seconds)
        heapq.heappush(free_at, start + seconds)
    return end


def main(argv: list[str] | None = None) -> int:
    from server.devices import server_slots
    from server.settings import Settings
    from trainer.capabilities import resolve_device_type

    parser = argparse.ArgumentParser(prog="python -m server.planner", description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, required=True, help="learners in the class")
    parser.add_argument("--minutes", type=float, required=True, help="minutes of the session")
    parser.add_argument("--workers", type=int, default=None,
                        help="jobs the server runs at once (default: one per GPU of the settings, or 1 on a CPU)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        device_type = resolve_device_type(settings.device)
        workers = args.workers or max(1, len(server_slots(device_type, settings.gpus)))
        store = HistoryStore(settings.history_path) if settings.history_path.exists() else None
        plan = plan_session(Offer.for_device(settings, device_type), store, args.learners, args.minutes, workers)
    except TrainerError as err:
        print(f"planner: {err}", file=sys.stderr)
        return 2
    print("\n".join(plan.describe()))
    print(f"Presets: {plan.presets}")
    return 0 if plan.fits else 1


if __name__ == "__main__":
    sys.exit(main())
