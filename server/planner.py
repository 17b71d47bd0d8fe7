"""The session planner: which settings let every learner of a class run what the class allows in the time there is.

From the number of learners, the minutes of the session and the server's workers, it tries the Run page's settings
from the lab's own (5 epochs of the whole split, the lab's DataLoader, batch 256) down to a subset of a few
thousand images, never a run too short to time (trainer.timing_quality.MIN_STEPS_TO_TIME, the threshold Results
judges by), each estimated on this server (server/estimate.py: from its own past runs of those modes where it has
some, else the coarse table, and says which). It counts every kind of job the class's policy lets a learner queue,
as many as its cap allows (the quick demo, the comparisons, the tiny fp16 run, the ablation, the safeguard pairs),
and proposes the largest settings whose forecast fits with a margin: when the last job ends if everyone queues
everything at the start (the fair queue runs everyone's first job before anyone's second).

    python -m server.planner --learners 30 --minutes 120      # before class, from the server's settings and history
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass, replace

from server.estimate import job_estimate
from server.history import HistoryStore
from server.kinds import PAGE_KINDS, KindPolicy, KindRule
from server.offer import BATCH_SIZES, ComparisonRequest, Offer
from server.presets import presets_text
from trainer.comparison_table import format_seconds
from trainer.errors import ConfigError, TrainerError
from trainer.timing_quality import MIN_STEPS_TO_TIME

MARGIN = 0.8  # the forecast must end by 80% of the session: late joiners, a second try, a slow first run
EPOCH_STEPS = (5, 3, 2, 1)
SUBSET_STEPS = (None, 25_000, 10_000, 5_000, 2_048, 1_024, 512, 256)
BATCH_STEPS = (256, 128, 64)  # the lab's first; a smaller batch gives a small subset enough steps to time
LOADER_STEPS = ("dataloader", "resident")  # the lab's own first
UNCAPPED_ASSUMED = 1  # a kind the policy does not cap is planned as one job a learner (the plan says so)
# Where even the smallest settings do not fit with everything the policy allows, the caps the plan lowers, one step
# at a time in this order (what a learner loses least by first); applying the plan sets them in the console.
CAP_CUTS = (("safeguards", 1), ("comparison", 1), ("safeguards", 0), ("tiny-fp16", 0), ("ablation", 0))


@dataclass(frozen=True)
class Plan:
    """The settings proposed for a class, and what they cost on this server."""

    learners: int
    minutes: float
    workers: int
    request: ComparisonRequest  # where every Run page starts
    comparison_s: float  # one comparison at those settings, start-up and accuracy check included
    demo_s: float | None  # the quick demo, where the class allows one (None: it does not)
    forecast_s: float  # when the last learner's last job ends, everyone queueing everything at the start
    from_history: bool  # every estimate from this server's own past runs (else partly the coarse table)
    jobs: tuple[tuple[str, int, float], ...] = ()  # per learner: (kind, how many, seconds each), in queue order
    assumed: tuple[str, ...] = ()  # kinds without a cap, planned as UNCAPPED_ASSUMED each
    caps: tuple[tuple[str, int], ...] = ()  # per-learner caps the plan lowered to fit (0: the kind turned off)

    @property
    def steps(self) -> int:
        """Steps of one run at the plan's settings (a subset's last, smaller batch counted)."""
        images = self.request.subset or 50_000
        return self.request.epochs * -(-images // self.request.batch_size)

    @property
    def learner_s(self) -> float:
        """Everything one learner may queue, in seconds of a worker."""
        return sum(count * seconds for _, count, seconds in self.jobs)

    @property
    def fits(self) -> bool:
        return self.forecast_s <= MARGIN * self.minutes * 60

    def kind_rules(self, policy: KindPolicy) -> dict[str, KindRule]:
        """The class's rules with the caps this plan lowered (a cap of 0 turns the kind off), for the console."""
        rules = dict(policy.rules)
        for kind, cap in self.caps:
            rules[kind] = KindRule(False, None) if cap == 0 else KindRule(True, cap)
        return rules

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
        verdict = ("fits" if self.fits else "does not fit") + f" {MARGIN:.0%} of the {self.minutes:g} minutes"
        counted = "; ".join(f"{count} x {PAGE_KINDS.get(kind, kind)} ({format_seconds(seconds)})"
                            for kind, count, seconds in self.jobs)
        assumed = ("" if not self.assumed else f" The policy caps no {', '.join(self.assumed)}: planned as "
                   f"{UNCAPPED_ASSUMED} each; set a cap in the console to hold the class to it.")
        if self.caps:
            assumed += (" To fit, the plan lowers the caps: " + ", ".join(
                f"{PAGE_KINDS.get(kind, kind)} {'off' if cap == 0 else f'{cap} a learner'}" for kind, cap in self.caps)
                + " (applying the plan sets them).")
        return [
            f"Start every Run page at {self.request.describe()}: {self.steps} steps a run, enough to time (Results "
            f"calls under {MIN_STEPS_TO_TIME} too short); one comparison takes about "
            f"{format_seconds(self.comparison_s)} here ({source}).",
            f"Each learner may queue, as the class's policy allows: {counted}; "
            f"{format_seconds(self.learner_s)} of a worker each.{assumed}",
            f"{self.learners} learners on {self.workers} worker{'s' if self.workers != 1 else ''}, everyone queueing "
            f"everything at the start: the last job should end about {format_seconds(self.forecast_s)} after, which "
            f"{verdict}.",
        ]


def plan_session(offer: Offer, store: HistoryStore | None, learners: int, minutes: float, workers: int) -> Plan:
    """The largest workload (epochs x images, the lab's loader and batch first) whose forecast, with every job the
    class's policy lets a learner queue, fits MARGIN of the session within the instructor's limits; the smallest one
    tried when none fits. ConfigError for a class that cannot be planned (no learners, no time, no worker, or a
    device without any estimate)."""
    if learners < 1 or minutes <= 0 or workers < 1:
        raise ConfigError("a plan needs at least one learner, some minutes and one worker")
    caps: dict[str, int] = {}
    plan = _plan(offer, store, learners, minutes, workers, caps)
    for kind, cap in CAP_CUTS:
        if plan.fits:
            break
        if _allowed(offer, kind, caps) > cap:
            caps[kind] = cap
            plan = _plan(offer, store, learners, minutes, workers, caps)
    return plan


def _plan(offer: Offer, store: HistoryStore | None, learners: int, minutes: float, workers: int,
          caps: dict[str, int]) -> Plan:
    """The largest settings that fit under the policy's caps, lowered where `caps` says; else the smallest."""
    others, assumed = _other_jobs(offer, store, caps)
    demo_s = next((seconds for kind, _, seconds, _ in others if kind == "quick-demo"), None)
    comparisons = _allowed(offer, "comparison", caps)
    plans = []
    for request in _candidates(offer):
        comparison_s, from_history = job_estimate(offer.comparison(request), store, offer.device_type)
        if comparison_s is None or not comparisons:
            continue
        jobs = [(kind, count, seconds) for kind, count, seconds, _ in others if kind == "quick-demo"]
        jobs += [("comparison", comparisons, comparison_s)]
        jobs += [(kind, count, seconds) for kind, count, seconds, _ in others if kind != "quick-demo"]
        rounds = [seconds for _, count, seconds in jobs for _ in range(count)]  # one learner's jobs, in order
        forecast_s = _last_end([seconds for seconds in rounds for _ in range(learners)], workers)
        measured = from_history and all(known for *_, known in others)
        plans.append(Plan(learners, minutes, workers, request, comparison_s, demo_s, forecast_s, measured,
                          tuple(jobs), tuple(PAGE_KINDS[kind] for kind in assumed), tuple(caps.items())))
    if not plans:
        raise ConfigError(f"no estimate exists for a comparison on this {offer.device_type}: run one first")
    fitting = [plan for plan in plans if plan.fits]
    return fitting[0] if fitting else plans[-1]


def _allowed(offer: Offer, kind: str, caps: dict[str, int]) -> int:
    """How many jobs of `kind` one learner may queue: the class's policy (0: off), or the plan's lower cap."""
    rule = offer.kinds.rule(kind)
    allowed = 0 if not rule.enabled else rule.per_learner or UNCAPPED_ASSUMED
    return min(allowed, caps.get(kind, allowed))


def _other_jobs(offer: Offer, store: HistoryStore | None,
                caps: dict[str, int]) -> tuple[list[tuple[str, int, float, bool]], list[str]]:
    """Every kind but the comparison a learner may queue, with its count and estimate (kinds the page offers,
    which the planner cannot estimate, are left out): (kind, count, seconds each, from this server's history)."""
    found, assumed = [], []
    for kind, spec in offer.starting_jobs().items():
        count = _allowed(offer, kind, caps)
        if kind == "comparison" or not count:
            continue
        seconds, known = job_estimate(spec, store, offer.device_type)
        if seconds is None:
            continue
        found.append((kind, count, seconds, known))
        if offer.kinds.rule(kind).per_learner is None:
            assumed.append(kind)
    return found, assumed


def _candidates(offer: Offer) -> list[ComparisonRequest]:
    """The Run page's settings from the lab's own down, largest workload first (the lab's loader and batch first
    among equals), within the instructor's limits, each run long enough to time."""
    base = ComparisonRequest(precision=offer.default_precision(), data=offer.default_data)
    allowed = offer.batch_sizes(BATCH_SIZES)
    batches = [batch for batch in BATCH_STEPS if batch in allowed] or [allowed[-1]]
    found = []
    for epochs in EPOCH_STEPS:
        for subset in SUBSET_STEPS:
            for batch_size in batches:
                if epochs * -(-(subset or 50_000) // batch_size) < MIN_STEPS_TO_TIME:
                    continue
                for loader in LOADER_STEPS:
                    request = replace(base, epochs=epochs, subset=subset, loader=loader, batch_size=batch_size)
                    try:
                        for run in offer.comparison(request).runs:
                            offer.check_limits(run)
                    except ConfigError:
                        continue
                    found.append(request)
    work = {request: request.epochs * (request.subset or 50_000) for request in found}
    return sorted(found, key=lambda request: (-work[request], -request.batch_size, LOADER_STEPS.index(request.loader)))


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
