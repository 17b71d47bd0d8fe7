"""Training runs as Ray tasks on a cluster: the optional engine beyond one server (requirements-cluster.txt).

Imported only when the instructor sets `ray_address` (or the class simulator picks Ray): nothing else imports
`ray`. The queue, limits and history stay in the app, which is the Ray driver; each run is one Ray task that
starts the run's own fresh process on its node (`trainer.isolated`) and streams its progress back as a generator.
How many runs go at once is read from the cluster again every few seconds (`RayRunner.slots`, `follow_cluster`),
so nodes can join and leave while the class works.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import ray
import ray.exceptions
from ray._private import ray_constants

from server.devices import Slot
from trainer.config import RunConfig
from trainer.isolated import TERMINATE_GRACE_S, RunOutcome, run_isolated
from trainer.progress import Progress

log = logging.getLogger(__name__)

POLL_S = 0.1
# How often the job manager's workers are matched to the cluster: one small query to the cluster's control store,
# so a joining node gets its first job within a few seconds.
RESIZE_EVERY_S = 5.0
LOOPBACK = "127.0.0.1"
# A cancelled task first stops its run itself (terminate, then kill after TERMINATE_GRACE_S); Ray kills the worker
# only after this, and the run's process then notices its parent is gone and ends its own group.
FORCE_CANCEL_AFTER_S = TERMINATE_GRACE_S + 1.0
_PACKAGES = [str(Path(__file__).resolve().parent.parent / name) for name in ("trainer", "server")]


@ray.remote(max_retries=0)  # a re-run would mix timings and spend the class's GPU time twice
def _run_task(config: dict, env: dict):
    """On a Ray worker: one run in a fresh child process; yields ("spawn"|"progress"|"outcome", payload) events."""
    events: queue.Queue = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        try:
            outcome = run_isolated(
                RunConfig.from_dict(config),
                on_progress=lambda p: events.put(("progress", p.to_dict())),
                should_cancel=stop.is_set,
                on_spawn=lambda pid: events.put(("spawn", {"pid": pid, "node": os.uname().nodename,
                                                           "node_id": ray.get_runtime_context().get_node_id()})),
                env=env,
            )
        except BaseException as err:  # reported as the run's failure rather than lost with this thread
            outcome = RunOutcome(RunConfig.from_dict(config, stored=True), "failed", error=str(err),
                                 error_kind="crashed")
        events.put(("outcome", outcome.to_dict()))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        while True:
            try:
                kind, payload = events.get(timeout=POLL_S)  # a timeout, so a cancel's KeyboardInterrupt lands
            except queue.Empty:
                continue
            yield kind, payload
            if kind == "outcome":
                return
    finally:
        stop.set()
        worker.join(timeout=TERMINATE_GRACE_S + 2.0)


class RayRunner:
    """A runner like `run_isolated` whose runs execute as Ray tasks: `num_gpus=1` each on a GPU cluster, a whole
    node's CPUs each on a CPU cluster (one run per node, so timings stay clean)."""

    def __init__(self):
        self.runs_by_node: Counter[str] = Counter()  # Ray node id -> runs started there (several nodes may share a host)
        nodes = _alive_nodes()
        # Fixed for the server's life: the jobs were checked against it when they were queued.
        self.device_type = "cuda" if any(node.get("GPU") for node in nodes) else "cpu"
        self._read(nodes)

    @classmethod
    def start(cls, address: str | None, fake_gpus: int | None = None) -> RayRunner:
        """Join the cluster at `address`, or (None) start a local Ray on loopback, with `fake_gpus` GPU resources."""
        runtime_env = {"py_modules": _PACKAGES}  # the nodes need this project's venv, not its checkout
        if address:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        else:
            _loopback_only()
            ray.init(
                num_cpus=os.cpu_count() or 1,
                num_gpus=fake_gpus,
                include_dashboard=False,
                _node_ip_address=LOOPBACK,
                runtime_env=runtime_env,
                log_to_driver=False,
            )
        return cls()

    def slots(self, workers: int | None = None) -> list[Slot]:
        """The job manager's workers as the cluster is now: one per GPU (on a CPU cluster, one per node), at least
        one, unless `workers` fixes the count. The manager asks again every few seconds, so the count follows the
        cluster; it is the one place that decides it."""
        if not workers:
            self._read(_alive_nodes())
            workers = max(1, self.gpus if self.device_type == "cuda" else self.nodes)
        return [Slot(f"ray {n}") for n in range(workers)]

    def _read(self, nodes: list[dict]) -> None:
        """Take the alive nodes' resources: the GPU and node counts and what one run asks of a node."""
        self.gpus = int(sum(node.get("GPU", 0) for node in nodes))
        self.nodes = len(nodes)
        if self.device_type == "cuda":
            self._options = {"num_gpus": 1, "num_cpus": 1}
        else:
            self._options = {"num_cpus": min((node.get("CPU", 1) for node in nodes), default=1)}

    def close(self) -> None:
        ray.shutdown()

    def __call__(self, config: RunConfig, on_progress=None, should_cancel=None, on_spawn=None, env=None) -> RunOutcome:
        # Ray sets CUDA_VISIBLE_DEVICES for the GPU it gives the task; the local pinning does not travel.
        task_env = {k: v for k, v in (env or {}).items() if k != "CUDA_VISIBLE_DEVICES"}
        stream = _run_task.options(**self._options).remote(config.to_dict(), task_env)
        while True:
            if should_cancel is not None and should_cancel():
                self._cancel(stream)
                return RunOutcome(config, "cancelled", error="the run was cancelled", error_kind="CancelledError")
            ready, _ = ray.wait([stream], timeout=POLL_S)
            if not ready:
                continue
            try:
                kind, payload = ray.get(next(stream))
            except StopIteration:
                return RunOutcome(config, "failed", error="the Ray task ended without a result", error_kind="crashed")
            except ray.exceptions.RayError as err:
                return RunOutcome(config, "failed", error=_reason(err), error_kind="crashed")
            if kind == "progress" and on_progress is not None:
                on_progress(Progress.from_dict(payload))
            elif kind == "spawn":
                self.runs_by_node[payload.get("node_id", payload["node"])] += 1
                if on_spawn is not None:
                    on_spawn(payload["pid"])
            elif kind == "outcome":
                return RunOutcome.from_dict(payload)

    def _cancel(self, stream) -> None:
        """Ask the task to stop its run; force the worker down if it has not within FORCE_CANCEL_AFTER_S."""
        ray.cancel(stream)
        deadline = time.monotonic() + FORCE_CANCEL_AFTER_S
        while time.monotonic() < deadline:
            ready, _ = ray.wait([stream], timeout=POLL_S)
            if ready:
                try:
                    ray.get(next(stream))
                except (StopIteration, ray.exceptions.RayError):
                    return
        ray.cancel(stream, force=True)


def follow_cluster(manager, cluster_slots: Callable[[], list[Slot]], every_s: float = RESIZE_EVERY_S) -> None:
    """Have the job manager's workers follow the cluster: `cluster_slots` (RayRunner.slots) asked every `every_s`,
    outside the manager's lock (it is a network call), until the manager shuts down. A cluster that does not answer
    for a moment keeps the workers it had."""

    def follow() -> None:
        while not manager.wait_for_shutdown(every_s):
            try:
                slots = cluster_slots()
            except Exception:
                log.warning("could not read the cluster's size; keeping %d worker(s)", len(manager.slots),
                            exc_info=True)
                continue
            manager.set_slots(slots)

    threading.Thread(target=follow, name="amp-lab-jobs-capacity", daemon=True).start()


class LocalCluster:
    """A Ray cluster of several nodes on this machine, on loopback only, each node with its own fake GPUs (the runs
    use the CPU): how the tests and the class simulator show the workers following nodes that join and leave.

    The head (`gpus` fake GPUs) runs this process's driver and cannot be removed; `add_node` adds the others.
    """

    def __init__(self, gpus: int = 1):
        from ray.cluster_utils import Cluster  # Ray's own multi-node test harness

        _loopback_only()
        head = {**_local_node(gpus), "include_dashboard": False}
        self._cluster = Cluster(initialize_head=True, head_node_args=head)

    @property
    def address(self) -> str:
        return self._cluster.address

    def add_node(self, gpus: int = 1):
        """Start one more node and wait until the cluster has registered it; returns it, for `remove_node`."""
        return self._cluster.add_node(**_local_node(gpus))

    def remove_node(self, node) -> None:
        """Stop the node's processes, the runs on it included; the node tells the cluster as it stops (a machine that
        loses power does not, and Ray notices it only by its health checks)."""
        self._cluster.remove_node(node)

    def shutdown(self) -> None:
        """Stop every node; after the runner's `close`, which disconnects the driver."""
        self._cluster.shutdown()


def _loopback_only() -> None:
    """Keep a Ray that this process starts on 127.0.0.1: unless told it runs no real cluster (its switch for laptops),
    Ray swaps 127.0.0.1 for the machine's network address and listens on every interface."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # the node processes Ray starts from here
    ray_constants.ENABLE_RAY_CLUSTER = False  # this process read the variable when it imported Ray


def _local_node(gpus: int) -> dict:
    return {"num_cpus": 1, "num_gpus": gpus, "node_ip_address": LOOPBACK}


def _alive_nodes() -> list[dict]:
    """Each alive node's resources (`ray.nodes()` also lists the dead ones)."""
    return [node["Resources"] for node in ray.nodes() if node.get("Alive")]


def _reason(err: Exception) -> str:
    """One line for a learner about a run that Ray lost."""
    if isinstance(err, ray.exceptions.NodeDiedError):
        return "the cluster node running this job went down; submit it again"
    if isinstance(err, ray.exceptions.WorkerCrashedError):
        return "the Ray worker process running this job died (killed or out of memory); submit it again"
    if isinstance(err, ray.exceptions.TaskCancelledError):
        return "the run was cancelled on the cluster"
    first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return f"the cluster lost this run: {first.strip()[:250]}"
