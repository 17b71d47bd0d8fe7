"""Real-browser fixtures: a real `streamlit run app.py` on a free loopback port, driven by Debian's chromium
through Playwright. Without /usr/bin/chromium the suite skips, unless AMP_LAB_REQUIRE_BROWSER=1 (CI), where a
missing browser or any skipped browser test fails the run."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Debian's chromium; AMP_LAB_CHROMIUM points elsewhere (e.g. a path that does not exist, to see the skip).
CHROMIUM = Path(os.environ.get("AMP_LAB_CHROMIUM", "/usr/bin/chromium"))
REQUIRE_ENV = "AMP_LAB_REQUIRE_BROWSER"
ENABLE_HINT = (
    f"browser tests need Debian's chromium at {CHROMIUM}: run `apt-get install chromium` to enable them"
)
# A closed network: no background requests, updates, sync or QUIC that would only fail and slow the start.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"
SERVER_START_TIMEOUT_S = 90
DEFAULT_WAIT_MS = 60_000  # one action or wait; generous for a busy 2-core machine
MAX_SHOT_HEIGHT = 12_000

_skipped_while_required: list[str] = []


def browser_required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def pytest_report_header(config):
    if CHROMIUM.exists():
        return f"browser tests: {CHROMIUM} (required: {browser_required()})"
    if browser_required():
        return f"browser tests: {CHROMIUM} is missing and {REQUIRE_ENV}=1, so they will fail"
    return f"browser tests: will skip; {ENABLE_HINT}"


def pytest_collection_modifyitems(config, items):
    if CHROMIUM.exists() or browser_required():
        return
    skip = pytest.mark.skip(reason=ENABLE_HINT)
    for item in items:
        item.add_marker(skip)


def pytest_runtest_logreport(report):
    if browser_required() and report.skipped and not hasattr(report, "wasxfail"):
        _skipped_while_required.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _skipped_while_required:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _skipped_while_required:
        terminalreporter.write_line(
            f"{REQUIRE_ENV}=1 but {len(_skipped_while_required)} browser test(s) skipped; failing the run: "
            + ", ".join(_skipped_while_required),
            red=True,
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wait_until_healthy(proc: subprocess.Popen, url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited with code {proc.returncode} before serving:\n{_log_tail(log_path)}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"streamlit did not answer /_stcore/health within {SERVER_START_TIMEOUT_S}s:\n{_log_tail(log_path)}")


def _stop(proc: subprocess.Popen) -> None:
    # The server runs in its own process group, so the training subprocesses it spawned stop with it.
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{REQUIRE_ENV}=1 and {ENABLE_HINT}")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=DEFAULT_WAIT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@contextmanager
def serve(tmp_dir: Path, env_extra: dict | None = None, script: Path | None = None) -> Iterator[str]:
    """Start the app as `make run` does (serve.py), or `streamlit run <script>` from the repository root (so with
    its .streamlit/config.toml), with an empty state dir and data root in `tmp_dir`; yield its base URL. The
    server's log is `tmp_dir/streamlit.log`."""
    state_dir, data_root = tmp_dir / "state", tmp_dir / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    log_path = tmp_dir / "streamlit.log"
    # The instructor's limits of the outer shell must not leak in: the tests expect the defaults.
    env = {key: value for key, value in os.environ.items() if not key.startswith("AMP_LAB_")}
    env.update(AMP_LAB_STATE_DIR=str(state_dir), AMP_LAB_DATA_ROOT=str(data_root), AMP_LAB_CLASS_MODE="off",
               AMP_LAB_PEAKS_CACHE=os.environ["AMP_LAB_PEAKS_CACHE"])  # the session's (tests/conftest.py)
    env.update(env_extra or {})
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    launch = ["serve.py"] if script is None else ["-m", "streamlit", "run", str(script)]
    command = [
        sys.executable, *launch,
        "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        _wait_until_healthy(proc, url, log_path)
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def app_url(browser, tmp_path_factory):
    """Base URL of a real app server with its own empty state dir and an empty data root (so: synthetic data)."""
    with serve(tmp_path_factory.mktemp("server")) as url:
        yield url


@pytest.fixture
def fresh_server(browser, tmp_path):
    """`with fresh_server() as url:` starts a server of this test's own (see `serve`), for what only a process that
    has served nobody yet shows."""
    return lambda **kwargs: serve(tmp_path, **kwargs)


def _screenshot_name(nodeid_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid_name).strip("_") + ".png"


def save_full_page(page, path: Path) -> None:
    """Streamlit scrolls inside its main area, not the document, so a full-page screenshot alone stops at the
    viewport: grow the viewport to the main area's height for the shot, then restore it."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    height = page.evaluate(
        "() => (document.querySelector('[data-testid=\"stMain\"]') || document.documentElement).scrollHeight"
    )
    page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), MAX_SHOT_HEIGHT)})
    page.wait_for_timeout(300)  # charts re-lay themselves out for the new size
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


@pytest.fixture
def screenshot(request):
    """Save a full-page screenshot now, named after the test and `suffix` (for a step in the middle of a test)."""

    def save(page, suffix: str) -> Path:
        path = SCREENSHOTS / _screenshot_name(request.node.name + suffix)
        save_full_page(page, path)
        return path

    return save


@pytest.fixture
def new_page(browser, request):
    """Factory for pages, each in its own browser context (its own Streamlit session, like a separate learner).
    Every page leaves a full-page screenshot under artifacts/screenshots/, also when the test fails."""
    contexts = []

    def make(suffix: str = ""):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(DEFAULT_WAIT_MS)
        page = context.new_page()
        contexts.append((context, page, suffix))
        return page

    yield make
    for context, page, suffix in contexts:
        try:
            save_full_page(page, SCREENSHOTS / _screenshot_name(request.node.name + suffix))
        finally:
            context.close()


@pytest.fixture
def page(new_page):
    return new_page()
