"""How much of a core the app's own process spends while a class watches its jobs:
`python -m bench.class_pages_cpu --pages 10 --seconds 60`.

Starts the app (serve.py) on a free loopback port with an empty state folder, opens --pages real browser pages
(Debian's chromium, one browser context each: one learner each), has every learner submit a tiny comparison from
the Run page, then measures the CPU time of the Streamlit process alone (the training children excluded) while
the pages follow their jobs. Loopback only; it stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
TINY_RUN = "?epochs=1&batch_size=64&subset=512&loader=resident&data=synthetic"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(url: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the app did not start within {timeout_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10, help="learners, each with one open Run page")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to measure")
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if not 1 <= args.pages <= 30 or not 5 <= args.seconds <= 600:
        parser.error("--pages must be 1..30 and --seconds 5..600")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as state:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "AMP_LAB_STATE_DIR": state, "AMP_LAB_DATA_ROOT": str(Path(state) / "data"),
               "AMP_LAB_DEVICE": "cpu", "AMP_LAB_MAX_EPOCHS": "1"}
        server = subprocess.Popen(
            [sys.executable, "serve.py", "--server.port", str(port), "--server.address", "127.0.0.1"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_health(url)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                     args=["--headless", "--no-sandbox", "--disable-gpu"])
                pages = [browser.new_context().new_page() for _ in range(args.pages)]
                for page in pages:
                    page.goto(f"{url}/run{TINY_RUN}", timeout=120_000)
                    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=90_000)
                    page.get_by_role("button", name="Run", exact=True).click()
                time.sleep(5)  # the submits' own reruns are over; from here on the pages only follow their jobs
                process = psutil.Process(server.pid)
                before, started = process.cpu_times(), time.monotonic()
                end = started + args.seconds
                while time.monotonic() < end:
                    for page in pages:
                        page.wait_for_timeout(50)  # let the browser deliver the app's updates
                    time.sleep(0.5)
                after, wall = process.cpu_times(), time.monotonic() - started
                browser.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    cpu_s = (after.user + after.system) - (before.user + before.system)
    figures = {"pages": args.pages, "seconds": round(wall, 1), "server_cpu_s": round(cpu_s, 2),
               "share_of_one_core": round(cpu_s / wall, 3), "load_average_1min_at_end": round(os.getloadavg()[0], 2),
               "cores": os.cpu_count()}
    print(f"{args.pages} pages following their jobs for {wall:.0f} s: the app's process used {cpu_s:.1f} CPU-s, "
          f"{100 * cpu_s / wall:.1f}% of one core (training children excluded)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
