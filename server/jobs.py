"""The shared server's job queue: one worker thread per GPU (one on a CPU server) takes learners' jobs, round robin
by learner (everyone's first job before anyone's second). On a Ray cluster the workers follow the cluster
(server/ray_runner.follow_cluster sets their slots): they grow as nodes join, and shrink as they leave (a surplus
worker finishes its job first).

Each run of a job goes through a runner (by default `trainer.isolated.PrestartedRunner`: a fresh subprocess per run,
started and imported ahead), so a crash, an out-of-memory error or a kill from outside ends only that job.
"""

from __future__ import annotations

import copy
import functools
import heapq
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from server.batch_probe import probe_max_batch
from server.devices import Slot, server_slots
from server.estimate import estimate_run_seconds
from server.history import HistoryStore
from server.kinds import KindPolicy
from server.offer import Offer
from server.records import FINISHED_STATUSES, JobSpec, JobView
from server.settings import Settings
from trainer.capabilities import resolve_device_type
from trainer.child_process import run_python_json
from trainer.comparison_table import format_seconds
from trainer.config import RunConfig
from trainer.errors import ConfigError, TrainerError, one_line
from trainer.isolated import PrestartedRunner, RunOutcome
from trainer.peaks import DevicePeaks, device_key, forget, stored_peaks
from trainer.progress import Progress
from trainer.results import RunResult

log = logging.getLogger(__name__)

# Finished jobs kept in memory for live pages; older ones are read back from the history store.
FINISHED_KEPT_IN_MEMORY = 500
SHUTDOWN_REASON = "interrupted because the server shut down; submit the job again"
RESTART_NOTICE = ("The server restarted while this job was running: it runs again from the start, ahead of the "
                  "queue.")
MAX_REASON_CHARS = 200  # an instructor's reason for a cancel, as the learner reads it
INTERRUPTED_TWICE = "interrupted by a second server restart while it ran; submit the job again"
PEAKS_TIMEOUT_S = 180.0  # measuring a device's peaks: under 20 s on a 2-core CPU, seconds on a GPU


@dataclass
class _Job:
    """The manager's mutable record of a job; only touched while holding the manager's lock."""

    id: str
    learner_id: str
    spec: JobSpec
    run_estimates: list[float | None]
    created_at: float = field(default_factory=time.time)
    status: str = "queued"
    current_run: int = 0
    progress: Progress | None = None
    # Per run, the loss points so far: a tuple replaced on each new point, so a page's view shares it uncopied.
    live_losses: list[tuple[dict, ...]] = field(default_factory=list)
    outcomes: list[RunOutcome] = field(default_factory=list)
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    extras: dict = field(default_factory=dict)
    run_started_at: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    cancelled_by: str | None = None  # "its owner" or "the instructor"; None when the server stopped it

    @property
    def estimated_total_s(self) -> float | None:
        return None if None in self.run_estimates else sum(self.run_estimates)

    def remaining_s(self, now: float) -> float | None:
        """Rough time until this running job ends: the current run's rest plus the runs after it."""
        later = self.run_estimates[self.current_run + 1 :]
        if None in later:
            return None
        current = self.run_estimates[self.current_run]
        eta = self.progress.eta_s if self.progress else None
        if current is not None:
            elapsed = now - (self.run_started_at or now)
            current = max(current - elapsed, eta or 0.0)
        else:
            current = eta
        return None if current is None else current + sum(later)


class JobManager:
    """One FIFO queue and one worker thread per slot (a GPU, or the CPU); every change goes to the history.

    Built without touching anything: `start()` opens the history, joins the cluster the settings name, takes up the
    jobs an earlier process left and starts the workers. `slots` fixes the workers; where a cluster's size is
    followed, server/ray_runner.follow_cluster sets them (`set_slots`). `offer` gives the server's offer as it
    stands (the app's knows the device's modes from its hardware report); every job is admitted through it, once.
    """

    def __init__(
        self,
        settings: Settings,
        store: HistoryStore | None = None,
        runner: Callable[..., RunOutcome] | None = None,
        *,
        device_type: str | None = None,
        prober: Callable | None = None,
        slots: list[Slot] | None = None,
        silent_run_limit_s: float | None = None,
        offer: Callable[[], Offer] | None = None,
        peaks_beaten: Callable[[RunResult], bool] | None = None,
    ):
        self.settings = settings
        # A hung run (a stuck driver call, a deadlocked loader) would hold its worker, and its GPU, for good.
        self._silent_run_limit_s = silent_run_limit_s or settings.silent_run_limit_s
        self.store = store
        self.device_type = device_type
        self.started_at: float | None = None  # per-learner caps in the settings' mode count from start()
        self._offer = offer
        self._prestarted = PrestartedRunner() if runner is None and not settings.ray_address else None
        self._runner = runner or self._prestarted
        self._prober = prober
        self._cond = threading.Condition(threading.RLock())
        self._jobs: dict[str, _Job] = {}
        self._queue: list[str] = []  # waiting jobs as they were submitted (_ordered: the order they start in)
        self._head: set[str] = set()  # waiting jobs a restart interrupted: they start before the rest
        self._started: Counter[str] = Counter()  # jobs each learner has had started by this manager
        self._order: list[str] | None = None  # _ordered()'s answer until the queue changes (many views ask it)
        self._running: dict[str, _Job] = {}  # job id -> job, one per busy worker
        self._unsaved: set[str] = set()  # jobs whose last change the history store refused: saved again later
        self._stopping = False
        self._paused = False
        self.slots = slots  # the workers' slots (None: start() finds them); replaced, never changed in place
        self._workers: dict[str, threading.Thread] = {}  # slot label -> its worker, until the slot goes
        self.requeued_at_start = self.interrupted_at_start = 0
        # With `peaks_beaten` (the step budget's own test, which the app passes in), the workers whose device's peak
        # rates (trainer/peaks.py) are to be measured the next time they are idle: each local worker's at its start,
        # and again after a run beat them. A cluster's nodes are not this machine: their runs measure their own.
        self._peaks_due: set[str] = set()
        self._peaks_beaten = peaks_beaten

    def start(self) -> JobManager:
        """Open the history; on a server set up for a cluster, join it (and, unless `slots` fixed them, have the
        workers follow its size); take up the jobs an earlier process on this state folder left unfinished, once
        the workers' slots are known; start one worker per slot. Returns the manager."""
        if self.store is None:
            self.store = HistoryStore(self.settings.history_path)
        cluster = None
        if self._runner is None:
            from server.ray_runner import RayRunner, follow_cluster  # only a server set up for a cluster imports Ray

            self._runner = RayRunner.start(self.settings.ray_address)
            self.device_type = self.device_type or self._runner.device_type
            cluster = None if self.slots is not None else self._runner.slots
        self.device_type = self.device_type or resolve_device_type(self.settings.device)
        if self.slots is None:
            self.slots = cluster() if cluster else server_slots(self.device_type, self.settings.gpus)
        self.started_at = time.time()
        self._offer = self._offer or functools.partial(
            Offer.for_device, self.settings, self.device_type, KindPolicy.for_mode(self.settings.class_mode,
                                                                                   self.started_at))
        with self._cond:
            self.requeued_at_start, self.interrupted_at_start = self._restore_unfinished()
            for slot in self.slots:
                self._start_worker(slot)
        if cluster is not None:
            follow_cluster(self, cluster)
        return self

    # ---- what pages call ----------------------------------------------------------------------

    def submit(self, learner_id: str, spec: JobSpec) -> str:
        """Admit `spec` through the server's offer (its one door) and queue it; return the new job's id."""
        if not isinstance(learner_id, str) or not learner_id:
            raise ConfigError("a job needs a learner id")
        offer = self._offer()
        spec = offer.admit(spec, used=lambda purpose: self.store.count_jobs(learner_id, purpose, offer.kinds.since))
        estimates = [estimate_run_seconds(run, self.store, self.device_type) for run in spec.runs]
        job = _Job(id=uuid.uuid4().hex, learner_id=learner_id, spec=spec, run_estimates=estimates)
        job.extras["device_type"] = self.device_type
        with self._cond:
            if self._stopping:
                raise ConfigError("the job queue has shut down; reload the page")
            active = sum(1 for j in self._jobs.values() if j.learner_id == learner_id and not _done(j))
            limit = self.settings.max_queued_per_learner
            if active >= limit:
                waiting = "job" if active == 1 else "jobs"
                raise ConfigError(
                    f"you already have {active} {waiting} waiting or running; wait for one to finish or cancel it"
                    f" (this server allows {limit} per learner)"
                )
            self._check_class_queue()
            job.created_at = time.time()  # under the lock, so creation order is queue order
            self._persist(job, strict=True)
            self._jobs[job.id] = job
            self._queue.append(job.id)
            self._order = None
            self._cond.notify_all()
        return job.id

    def get(self, job_id: str) -> JobView | None:
        """The job's current state, from memory while this process knows it, else from the history."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None:
                return self._view(job)
        return self.store.get_job(job_id)

    def jobs_for_learner(self, learner_id: str) -> list[JobView]:
        """This learner's jobs, oldest first (including finished ones read back from the history)."""
        with self._cond:
            live = {j.id: self._view(j) for j in self._jobs.values() if j.learner_id == learner_id}
        stored = {v.id: v for v in self.store.list_jobs(learner_id=learner_id)}
        merged = {**stored, **live}
        return sorted(merged.values(), key=lambda v: v.created_at)

    def active_jobs_for(self, learner_id: str) -> list[JobView]:
        """This learner's queued and running jobs, oldest first: what a page follows on each tick, read from
        memory only (no history query)."""
        with self._cond:
            jobs = [j for j in self._jobs.values() if j.learner_id == learner_id and not _done(j)]
            return [self._view(j) for j in sorted(jobs, key=lambda j: j.created_at)]

    def cancel(self, job_id: str, learner_id: str) -> bool:
        """Cancel a queued or running job of `learner_id`; False if it is not theirs or already over."""
        return self._cancel(job_id, "its owner", lambda job: job.learner_id == learner_id)

    def cancel_any(self, job_id: str, reason: str = "") -> bool:
        """The instructor cancels any queued or running job, with a reason its learner reads where the job was;
        False if it is already over."""
        reason = " ".join(str(reason).split())[:MAX_REASON_CHARS]
        return self._cancel(job_id, "the instructor" + (f" ({reason})" if reason else ""), lambda job: True)

    def _cancel(self, job_id: str, by: str, allowed: Callable[[_Job], bool]) -> bool:
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or not allowed(job) or _done(job):
                return False
            job.cancelled_by = by
            job.cancel.set()
            if job.status == "queued":
                self._queue.remove(job.id)
                self._head.discard(job.id)
                self._order = None
                self._finish(job, "cancelled", f"cancelled by {by} before it started")
            return True

    def pause(self) -> None:
        """Start no new job (the running one finishes); queued jobs wait, and new ones can still queue."""
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def queue_views(self) -> list[JobView]:
        """The running job(s), then the queued ones in the order they will start."""
        with self._cond:
            jobs = sorted(self._running.values(), key=lambda job: job.started_at or 0.0)
            jobs += [self._jobs[job_id] for job_id in self._ordered()]
            return [self._view(job) for job in jobs]

    def queue_length(self) -> int:
        """Jobs waiting to start (the running one not included)."""
        with self._cond:
            return len(self._queue)

    def wait_for_new_job(self, learner_id: str | None = None) -> tuple[int, float | None]:
        """For a job `learner_id` submitted now: how many jobs of other learners would start or run before it (their
        own jobs are theirs to know, not a wait to report), and roughly how long until it starts."""
        with self._cond:
            order = self._ordered(newcomer=learner_id or "")
            position = order.index(None) + 1
            before = [self._jobs[job_id] for job_id in order[: position - 1]] + list(self._running.values())
            ahead = sum(1 for job in before if job.learner_id != learner_id)
            return ahead, self._wait_before(position, time.time())

    def shutdown(self, wait: bool = False, timeout: float | None = None) -> None:
        """Stop taking jobs and stop the running ones. Waiting jobs stay queued in the history, and a running one
        stays running there, so that the next server process on this state folder takes them up again."""
        with self._cond:
            self._stopping = True
            for job in self._running.values():
                job.cancel.set()
            self._cond.notify_all()
            threads = list(self._workers.values())
        if isinstance(self._runner, PrestartedRunner):
            self._runner.close()
        if wait:
            for thread in threads:
                thread.join(timeout)

    # ---- the worker ---------------------------------------------------------------------------

    def _start_worker(self, slot: Slot) -> None:
        if self._peaks_beaten is not None and not self.settings.ray_address:
            self._peaks_due.add(slot.label)
        worker = threading.Thread(target=self._work, args=(slot.label,), name=f"amp-lab-jobs-{slot.label}", daemon=True)
        self._workers[slot.label] = worker
        worker.start()
        if self._prestarted is not None:
            self._prestarted.prestart(slot.env)  # the first job on each worker starts training at once too

    def set_slots(self, slots: list[Slot]) -> None:
        """Take a cluster's slots as they are now: a worker for each new one; a worker whose slot has gone leaves
        when it next looks for work, so a running job is never stopped by a node joining or leaving."""
        with self._cond:
            if self._stopping or slots == self.slots:
                return
            log.info("the cluster now runs %d job(s) at once (was %d)", len(slots), len(self.slots))
            self.slots = list(slots)
            for slot in self.slots:
                if slot.label not in self._workers:
                    self._start_worker(slot)
            self._cond.notify_all()  # idle surplus workers leave now

    def wait_for_shutdown(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for shutdown(); True once it has come (a follower's sleep between reads)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stopping, timeout=timeout)

    def _slot(self, label: str) -> Slot | None:
        return next((slot for slot in self.slots if slot.label == label), None)

    def _has_work(self) -> bool:
        return bool(self._queue) and not self._paused

    def _ordered(self, newcomer: str | None = None) -> list[str | None]:
        """The waiting jobs' ids in the order they will start: jobs a restart interrupted first; then round robin by
        learner: a job's round is how many jobs its learner has had started, plus their own jobs waiting before it,
        so everyone's first job goes before anyone's second, and each round in the order they were submitted. With
        `newcomer`, a None stands where a job that learner submitted now would be."""
        if newcomer is None and self._order is not None:
            return self._order
        taken = Counter(self._started)
        keyed = []
        entries = [(job_id, self._jobs[job_id].learner_id) for job_id in self._queue]
        if newcomer is not None:
            entries.append((None, newcomer))
        for submitted, (job_id, learner) in enumerate(entries):
            keyed.append((job_id not in self._head, taken[learner], submitted, job_id))
            taken[learner] += 1
        order = [entry[-1] for entry in sorted(keyed, key=lambda entry: entry[:3])]
        if newcomer is None:
            self._order = order
        return order

    def _work(self, label: str) -> None:
        while True:
            with self._cond:
                while ((slot := self._slot(label)) is not None and not self._stopping and not self._has_work()
                       and label not in self._peaks_due):
                    self._cond.wait()
                if self._stopping:
                    return
                if slot is None:
                    del self._workers[label]
                    return
                if not self._has_work():  # idle, and this worker's peaks are due: measured now, not in a job
                    self._peaks_due.discard(label)
                    job = None
                else:
                    job = self._take(slot)
            if job is None:
                self._measure_peaks(slot)
                continue
            try:
                self._execute(job, slot)
            except Exception as err:  # the worker must outlive any job, whatever goes wrong in it
                log.exception("job %s failed inside the job manager", job.id)
                with self._cond:
                    self._finish(job, "failed", f"internal error in the job queue: {one_line(err)}")
            finally:
                with self._cond:
                    self._running.pop(job.id, None)
                    self._forget_old_jobs()

    def _take(self, slot: Slot) -> _Job:
        """The next job in the queue's order, now running on `slot` (holding the lock)."""
        job = self._jobs[self._ordered()[0]]
        self._queue.remove(job.id)
        self._head.discard(job.id)
        self._order = None
        self._started[job.learner_id] += 1
        job.status = "running"
        job.started_at = time.time()
        if slot.gpu is not None:
            job.extras["gpu"] = dict(slot.gpu)
        self._running[job.id] = job
        self._persist(job)
        return job

    def _measure_peaks(self, slot: Slot) -> None:
        """This worker's device's peak rates into the server's cache, in a fresh process pinned as its jobs are
        (trainer/peaks.py; it returns at once when the cache has them). A failure is logged: the runs then measure
        the peaks themselves after training, as the command line does."""
        cache = self.settings.peaks_cache_path
        if self.device_type == "cpu" and device_key(torch.device("cpu")) in {p.key for p in stored_peaks(cache)}:
            return  # this CPU is in the cache already (a GPU's name would need CUDA here: its child asks instead)
        args = ["-m", "trainer.peaks", "--cache", str(cache), "--device", self.device_type]
        try:
            measured = DevicePeaks.from_dict(run_python_json(args, timeout_s=PEAKS_TIMEOUT_S, env=dict(slot.env)))
        except TrainerError as err:
            log.warning("measuring the peak rates of %s failed: %s", slot.label, err)
            return
        log.info("peak rates of %s (%s): %s", slot.label, measured.key, measured.matmul_tflops)

    def _execute(self, job: _Job, slot: Slot) -> None:
        for index, config in enumerate(job.spec.runs):
            with self._cond:
                if job.cancel.is_set():
                    break
                job.current_run = index
                job.progress = None
                job.live_losses.append(())
                job.run_started_at = time.time()
                self._persist(job)
            started = time.monotonic()
            outcome = self._run_one(job, index, config, slot)
            if outcome.result is not None and self._beaten(outcome.result):
                with self._cond:
                    self._peaks_due.add(slot.label)
            with self._cond:
                job.outcomes.append(outcome)
                job.extras.setdefault("run_wall_s", []).append(round(time.monotonic() - started, 3))
                if outcome.status == "cancelled":
                    break
                if outcome.status != "ok":
                    where = f"run {index + 1} of {len(job.spec.runs)} ({config.precision})"
                    self._finish(job, "failed", f"{where}: {outcome.error or 'failed without a message'}")
                    return
                self._persist(job)
        else:
            if job.spec.kind == "sweep" and job.spec.probe_max_batch:
                self._probe_max_batch(job, slot)
            with self._cond:
                self._finish(job, "done", None)
            return
        with self._cond:
            if job.cancelled_by is None:  # the server is stopping: the history keeps the job as running, and the next
                return  # server process on this state folder runs it again (see _restore_unfinished)
            self._finish(job, "cancelled", f"cancelled by {job.cancelled_by} while running")

    def _run_one(self, job: _Job, index: int, config: RunConfig, slot: Slot) -> RunOutcome:
        heard_at, stalled, spawned = time.monotonic(), False, False

        def on_progress(progress: Progress) -> None:
            nonlocal heard_at
            heard_at = time.monotonic()
            with self._cond:
                job.progress = progress
                if progress.loss is not None:
                    point = {"step": progress.global_step, "epoch": progress.epoch, "loss": progress.loss}
                    job.live_losses[index] = (*job.live_losses[index], point)

        def should_stop() -> bool:
            nonlocal stalled
            if job.cancel.is_set():
                return True
            stalled = time.monotonic() - heard_at > self._silent_run_limit_s
            return stalled

        def on_spawn(pid: int) -> None:
            nonlocal heard_at, spawned
            heard_at, spawned = time.monotonic(), True
            log.info("job %s run %d is process %d", job.id, index + 1, pid)  # for an admin who must find it

        try:
            outcome = self._runner(
                config, on_progress=on_progress, should_cancel=should_stop, on_spawn=on_spawn, env=dict(slot.env)
            )
        except TrainerError as err:
            return _failed_outcome(config, str(err), type(err).__name__)
        except Exception as err:
            log.exception("runner raised for job %s", job.id)
            return _failed_outcome(config, f"the run could not start: {one_line(err)}", "crashed")
        if stalled and outcome.status == "cancelled":
            log.warning("job %s run %d sent no progress for %.0f s: stopped", job.id, index + 1, self._silent_run_limit_s)
            limit = format_seconds(self._silent_run_limit_s)
            if not spawned:  # a Ray task the cluster never started: no node had a free GPU (or CPU) for it
                error = f"the cluster did not start the run within {limit} (no free GPU or node), so it was given up"
            else:
                last = job.progress.phase if job.progress else "nothing yet"
                error = f"the run reported no progress for {limit} (its last report: {last}) and was stopped as hung"
            return _failed_outcome(config, f"{error} (the server's silent_run_limit_s)", "StalledError")
        return outcome

    def _beaten(self, result: RunResult) -> bool:
        """Whether a finished run beat the peaks it was set against; then they are dropped from the cache."""
        if not result.device_peaks or self._peaks_beaten is None or not self._peaks_beaten(result):
            return False
        peaks = DevicePeaks.from_dict(result.device_peaks)
        log.warning("a run beat the cached peak rates of %s: they are measured again", peaks.key)
        forget(peaks, self.settings.peaks_cache_path)
        return True

    def _probe_max_batch(self, job: _Job, slot: Slot) -> None:
        if self.device_type != "cuda":
            with self._cond:
                job.extras["max_batch_note"] = "the largest-batch search runs only on a CUDA GPU; skipped on the CPU"
            return
        # The search's own runs stay on this worker's GPU.
        prober = self._prober or functools.partial(
            probe_max_batch, runner=functools.partial(self._runner, env=dict(slot.env))
        )
        found, note = None, None
        try:
            found = prober(job.spec.runs[0], job.spec.precisions, should_cancel=job.cancel.is_set)
        except TrainerError as err:
            found, note = None, f"the largest-batch search stopped: {err}"
        except Exception as err:
            log.exception("max-batch probe failed for job %s", job.id)
            found, note = None, f"the largest-batch search failed: {one_line(err)}"
        with self._cond:
            if found is not None:
                job.extras["max_batch"] = dict(found)
            elif not job.cancel.is_set():
                job.extras["max_batch_note"] = note

    # ---- helpers ------------------------------------------------------------------------------

    def _restore_unfinished(self) -> tuple[int, int]:
        """At start-up, the jobs an earlier server process on this state folder left unfinished: each waiting job
        waits again, in its order; a job that was running runs again from the start, ahead of the queue, once (a
        second interruption fails it); a job today's settings refuse fails saying why. Returns (queued again,
        failed)."""
        # Today's limits and device, no page needed; the kinds were judged when each job was submitted.
        door = Offer.for_device(self.settings, self.device_type, KindPolicy.for_mode(class_mode=False))
        requeued = failed = 0
        for view in self.store.unfinished_jobs():
            restarts = view.extras.get("restarts", 0) + (view.status == "running")
            job = _Job(id=view.id, learner_id=view.learner_id, spec=view.spec, run_estimates=[],
                       created_at=view.created_at, extras={"device_type": self.device_type, "restarts": restarts})
            try:
                if restarts > 1:
                    raise TrainerError(INTERRUPTED_TWICE)
                job.spec = door.admit(view.spec)
            except TrainerError as err:
                self._finish(job, "failed", str(err) if restarts > 1 else
                             f"the server restarted with settings that refuse this job: {err}")
                failed += 1
                continue
            job.run_estimates = [estimate_run_seconds(run, self.store, self.device_type) for run in job.spec.runs]
            if view.status == "running":
                job.extras["notice"] = RESTART_NOTICE
                self._head.add(job.id)
            self._jobs[job.id] = job
            self._queue.append(job.id)
            self._order = None
            self._persist(job)
            requeued += 1
        if requeued or failed:
            log.info("after a restart: %d unfinished job(s) queued again, %d failed", requeued, failed)
        return requeued, failed

    def _check_class_queue(self) -> None:
        """Refuse a job over the instructor's cap on waiting jobs, saying how long the queue takes now."""
        limit = self.settings.max_queued_total
        if limit is None or len(self._queue) < limit:
            return
        waiting = len(self._queue)
        wait = self._wait_before(waiting + 1, time.time())
        raise ConfigError(
            f"the class queue is full: {waiting} job{' is' if waiting == 1 else 's are'} waiting (this server "
            f"allows {limit}) and the current wait is {'unknown' if wait is None else 'about ' + format_seconds(wait)}"
            "; try again later"
        )

    def _finish(self, job: _Job, status: str, error: str | None) -> None:
        if status == "cancelled" and job.cancelled_by is None:
            status, error = "failed", SHUTDOWN_REASON
        job.status = status
        job.error = error
        job.finished_at = time.time()
        self._persist(job)

    def _persist(self, job: _Job, strict: bool = False) -> None:
        """Save the job's current state; one the store refuses is saved again with the next change that it takes,
        so a finished job's result is not left as "running" in the history (and lost at a restart)."""
        try:
            self.store.save_job(self._view(job))
        except Exception:  # whatever the store raises, a worker must outlive it (a dead one is never replaced)
            if strict:
                raise
            log.exception("could not record job %s in the history", job.id)
            self._unsaved.add(job.id)
            return
        self._unsaved.discard(job.id)
        for job_id in list(self._unsaved):
            try:
                self.store.save_job(self._view(self._jobs[job_id]))
            except Exception:
                return  # still refused: the next save tries again
            self._unsaved.discard(job_id)

    def _forget_old_jobs(self) -> None:
        finished = [j for j in self._jobs.values() if _done(j) and j.id not in self._unsaved]
        for job in sorted(finished, key=lambda j: j.finished_at or 0)[:-FINISHED_KEPT_IN_MEMORY]:
            del self._jobs[job.id]

    def _view(self, job: _Job) -> JobView:
        now = time.time()
        position = wait = None
        if job.status == "queued" and job.id in self._queue:
            position = self._ordered().index(job.id) + 1
            wait = self._wait_before(position, now)
        return JobView(
            id=job.id,
            learner_id=job.learner_id,
            kind=job.spec.kind,
            label=job.spec.label,
            status=job.status,
            queue_position=position,
            estimated_wait_s=wait,
            current_run=job.current_run,
            progress=copy.copy(job.progress),
            live_losses=list(job.live_losses),
            outcomes=list(job.outcomes),
            error=job.error,
            spec=copy.deepcopy(job.spec),
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            extras=copy.deepcopy(job.extras),
            estimated_total_s=job.estimated_total_s,
            cancel_requested=job.cancel.is_set() and not _done(job),
            remaining_s=job.remaining_s(now) if job.status == "running" else None,
        )

    def _wait_before(self, position: int, now: float) -> float | None:
        """Estimated seconds until the job at `position` starts: the jobs ahead, each given to the first worker
        that frees up (a running job's rest, then the queued ones in order)."""
        free_at = [job.remaining_s(now) for job in self._running.values()]
        free_at += [0.0] * max(0, len(self.slots) - len(free_at))
        ahead = [self._jobs[job_id].estimated_total_s for job_id in self._ordered()[: position - 1]]
        if not free_at or None in free_at or None in ahead:  # no worker at all: a cluster with no node right now
            return None
        heapq.heapify(free_at)
        for seconds in ahead:
            heapq.heappush(free_at, heapq.heappop(free_at) + seconds)
        return float(free_at[0])


def _done(job: _Job) -> bool:
    return job.status in FINISHED_STATUSES


def _failed_outcome(config: RunConfig, error: str, kind: str) -> RunOutcome:
    return RunOutcome(config=config, status="failed", result=None, error=error, error_kind=kind)
