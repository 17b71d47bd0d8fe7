"""The class on a two-node Ray cluster started the way an operator would (docs/deploy.md, "Beyond one server:
Ray"): `ray start --head` and a second `ray start --address`, with the token authentication Ray 2.60 turns on for
them, on this machine's loopback, and the app's `ray_address` pointing at it.

The nodes listen on 127.0.0.2 and 127.0.0.3 (loopback addresses too): Ray replaces 127.0.0.1 with the machine's
network address when a node may be joined by others, and refuses a second node when told to stay on 127.0.0.1.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray runner needs requirements-cluster.txt")

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
HEAD, NODE = "127.0.0.2", "127.0.0.3"


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((HEAD, 0))
        return probe.getsockname()[1]


def ray_start(args: list[str], env: dict) -> None:
    started = subprocess.run([RAY, "start", *args], env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, f"ray start {' '.join(args)} failed: {started.stderr[-2000:]}"


@pytest.fixture
def operator_cluster(tmp_path):
    """Two CPU nodes of one core each (one run per node, as on a CPU cluster), started with `ray start`, token
    authentication on; stopped after."""
    # A cluster others may join (the switch earlier tests in this process may have turned off, for one-node Rays).
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    port = free_port()
    short = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # Ray's socket paths must stay under 108 characters
    common = ["--num-cpus", "1", "--num-gpus", "0", "--disable-usage-stats", "--temp-dir", str(short)]
    try:
        ray_start(["--head", "--node-ip-address", HEAD, "--port", str(port), "--include-dashboard", "false", *common],
                  env)
        ray_start(["--address", f"{HEAD}:{port}", "--node-ip-address", NODE, *common], env)
        yield f"{HEAD}:{port}", env
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(short, ignore_errors=True)


@pytest.mark.slow
def test_a_class_on_a_two_node_cluster_started_with_ray_start(operator_cluster, tmp_path):
    address, env = operator_cluster
    # Without the cluster's token a client is refused: the authentication is on.
    refused = subprocess.run([RAY, "status", "--address", address], env={**env, "RAY_AUTH_TOKEN": "0" * 64},
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "token" in (refused.stdout + refused.stderr).lower()

    out = tmp_path / "class.json"
    sim = subprocess.run([sys.executable, "-m", "bench.class_sim", "--backend", "ray", "--ray-address", address,
                          "--learners", "2", "--timeout", "240", "--json", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert sim.returncode == 0, sim.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert (figures["finished"], figures["lost"], figures["duplicated"], figures["refused"]) == (2, 0, 0, [])
    assert figures["nodes"] == 2 and figures["nodes_used"] == 2 and figures["max_concurrent_runs"] == 2

    # The app's own path (settings.ray_address), and a node that leaves mid-job: that job fails in one line, the
    # other finishes, and the queue goes on.
    host = subprocess.Popen([sys.executable, "-m", "tests.server.ray_operator_host", address, str(tmp_path / "app")],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout.readline().strip() == "running"
        raylet = subprocess.run(["pgrep", "-f", f"raylet.*--node_ip_address={NODE}"], capture_output=True,
                                text=True).stdout.split()
        assert raylet, "the second node's raylet was not found"
        for pid in raylet:
            os.kill(int(pid), signal.SIGKILL)  # the machine behind the node goes away
        host.stdin.write("go\n")
        host.stdin.flush()
        ends = [json.loads(line) for line in host.stdout if line.startswith("{")]  # Ray may print too
        assert host.wait(timeout=60) == 0
    finally:
        if host.poll() is None:
            host.kill()
    by_learner = {end["learner"]: end for end in ends}
    statuses = sorted(by_learner[learner]["status"] for learner in ("ada", "bob"))
    assert statuses == ["done", "failed"], ends
    lost = next(end for end in ends if end["status"] == "failed")
    assert "\n" not in lost["error"] and lost["error"].startswith("run ")
    assert by_learner["cy"]["status"] == "done", ends  # the queue went on, on the node that stayed
