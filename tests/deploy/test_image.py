"""The container image as an operator gets it: built from the Containerfile by `make image` (on a Debian base made
here, since no registry is reachable, and with the wheels this machine's pip already has, so the build downloads
nothing), started, healthy, training inside, and keeping the class's history in its volume across containers."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, DEFAULT_WAIT_MS
from tests.browser.test_app_browser import (
    TINY_RUN_LABEL,
    choose_tiny_comparison,
    click_nav,
    expect_table_to_show,
    heading,
    open_experiment,
    wait_for_done,
    wait_until_idle,
)

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/amp-lab:test"
BASE = os.environ.get("AMP_LAB_IMAGE_BASE", "local")  # `make image`'s IMAGE_BASE; local: deploy/local-base.sh
WHEELS = Path.home() / ".cache" / "amp-lab" / "wheels"  # kept between runs, so a second build copies no wheel
BUILD_TIMEOUT_S = 1200
HEALTHY_WITHIN_S = 60
# What must never reach the image: planted in the build's context, as an operator's checkout may hold them.
PLANTED = {
    ".streamlit/secrets.toml": "[auth]\ncookie_secret = 'planted-cookie-secret'\n",
    "amp-lab.env": "AMP_LAB_INSTRUCTOR_PASSWORD=planted-password\n",
    "state/history.sqlite3": "planted state",
    "data/cifar-10-batches-py/test_batch": "planted data",
}


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        pytest.fail(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


def image_id() -> str | None:
    done = podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The image built by `make image` from a copy of this checkout (the files git tracks or would, plus PLANTED)."""
    if not shutil.which("podman") or (BASE == "local" and not shutil.which("debootstrap")):
        return None  # each test says what it needs (the `need` fixture)
    context = tmp_path_factory.mktemp("context")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, context / name)
    for name, text in PLANTED.items():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(text)
    before = image_id()
    log = REPO / "artifacts" / "image-build.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        built = subprocess.run(["make", "-C", str(REPO), "image", f"IMAGE={IMAGE}", f"IMAGE_BASE={BASE}",
                                f"WHEELS={WHEELS}", f"IMAGE_CONTEXT={context}"], stdout=out, stderr=subprocess.STDOUT,
                               timeout=BUILD_TIMEOUT_S)
    if built.returncode:
        pytest.fail(f"make image exited {built.returncode}:\n" + "\n".join(log.read_text().splitlines()[-30:]))
    if before and before != image_id():
        podman("rmi", before, check=False)  # the last run's image: its layers that no other image shares
    return IMAGE


def test_the_image_holds_the_app_and_no_secret_state_or_data(need, image):
    need("podman", *(["debootstrap"] if BASE == "local" else []))
    files = podman("run", "--rm", "--entrypoint", "find", image, "/app", "-path", "/app/.venv", "-prune", "-o",
                   "-type", "f", "-printf", "%P\n").stdout.split()
    assert {"app.py", "serve.py", "server/state.py", "deploy/healthcheck.py", ".streamlit/config.toml"} <= set(files)
    assert not set(files) & set(PLANTED) and not any(f.startswith(("tests/", "state/", "data/")) for f in files)
    (config,) = json.loads(podman("image", "inspect", image).stdout)
    assert config["Config"]["User"] == "amp-lab" and "/state" in config["Config"]["Volumes"]
    assert not [v for v in config["Config"]["Env"] if "PASSWORD" in v or "planted" in v]
    assert config["Healthcheck"]["Test"] == ["CMD", "python", "deploy/healthcheck.py"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(name: str, volume: str, port: int, env_file: Path) -> float:
    """Start a container of the image as compose.yaml does (init, the state volume, an env file); return the seconds
    until /_stcore/health answered 200."""
    started = time.monotonic()
    podman("run", "--detach", "--name", name, "--init", "--publish", f"127.0.0.1:{port}:8501", "--volume",
           f"{volume}:/state", "--env-file", str(env_file), "--shm-size", "1g", IMAGE)
    while time.monotonic() - started < HEALTHY_WITHIN_S:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(0.5)
    logs = podman("logs", name, check=False)
    pytest.fail(f"no 200 from /_stcore/health within {HEALTHY_WITHIN_S} s:\n{(logs.stdout + logs.stderr)[-3000:]}")


def test_the_image_serves_trains_and_keeps_a_job_across_a_new_container(need, image, tmp_path):
    need("podman", "chromium", *(["debootstrap"] if BASE == "local" else []))
    from playwright.sync_api import expect, sync_playwright

    name, volume, port = f"amp-lab-test-{os.getpid()}", f"amp-lab-test-{os.getpid()}-state", free_port()
    env_file = tmp_path / "amp-lab.env"
    env_file.write_text("AMP_LAB_CLASS_MODE=off\n")
    url = f"http://127.0.0.1:{port}"
    try:
        assert start(name, volume, port, env_file) < HEALTHY_WITHIN_S
        assert podman("healthcheck", "run", name, check=False).returncode == 0  # the image's own HEALTHCHECK
        compared = podman("exec", name, "python", "-m", "trainer", "compare", "--data", "synthetic", "--device", "cpu",
                          "--loader", "resident", "--workers", "0", "--epochs", "1", "--batch-size", "32", "--subset",
                          "64", "--test-subset", "32", "--json", "/tmp/compare.json", timeout=300)
        runs = json.loads(podman("exec", name, "cat", "/tmp/compare.json").stdout)["runs"]
        assert [run["config"]["precision"] for run in runs] == ["fp32", "amp-bf16"], compared.stdout[-2000:]

        expect.set_options(timeout=DEFAULT_WAIT_MS)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
            page = browser.new_context().new_page()  # one learner: the cookie keeps them across the two containers
            open_experiment(page, url)
            choose_tiny_comparison(page)
            page.get_by_role("button", name="Run", exact=True).click()
            wait_for_done(page)

            podman("rm", "--force", "--time", "10", name)  # a new container, as after `docker compose up` upgrades
            start(name, volume, port, env_file)
            page.goto(url)
            wait_until_idle(page)
            click_nav(page, "History", "history")
            heading(page, "History").wait_for()
            wait_until_idle(page)
            expect_table_to_show(page, TINY_RUN_LABEL, "done")
            browser.close()
    finally:
        podman("rm", "--force", "--time", "5", name, check=False)
        podman("volume", "rm", "--force", volume, check=False)
