"""Write a state folder with the code of an old commit, as that release wrote it, and save its history file as SQL:
the fixtures tests/server/test_state.py opens with today's code.

    python tests/server/old_states/make_old_state.py ca1c5c7 tests/server/old_states/schema1-ca1c5c7.sql
    python tests/server/old_states/make_old_state.py 00404e7 tests/server/old_states/schema3-00404e7.sql

ca1c5c7 is the first release with a history (schema 1: jobs and their runs, a job's owner a session); 00404e7 the
first whose state holds every kind of record (schema 3: jobs, runs, learners, guesses, the console's settings in
their one-row tables, the server's secret). The old code runs its own job manager on real tiny runs (synthetic data,
on the CPU), in a copy of that commit's tree (git archive), with this checkout's Python and packages; a few seconds
each. The SQL ends with the file's PRAGMA user_version, which a dump leaves out.
"""

import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# What each commit's own code does to fill a state folder. STATE is the folder; each ends with every job finished.
WRITERS = {
    "ca1c5c7": """
import time
from trainer.config import RunConfig
from trainer.jobs import JobManager, JobSpec
from trainer.settings import Settings

def tiny(precision, seed=0):
    return RunConfig(precision=precision, epochs=1, batch_size=64, data="synthetic", loader="resident", subset=256,
                     test_subset=128, num_workers=0, device="cpu", seed=seed)

manager = JobManager(Settings(state_dir=STATE, data_root=STATE + "/data", device="cpu"))
jobs = [manager.submit("session-ada", JobSpec("compare", [tiny("fp32"), tiny("amp-bf16")], "ada's comparison")),
        manager.submit("session-bob", JobSpec("run", [tiny("fp32", 1)], "bob's run")),
        manager.submit("session-bob", JobSpec("run", [tiny("fp32", 2)], "bob's cancelled run"))]
manager.cancel(jobs[2], "session-bob")
while not all(manager.get(job).status in ("done", "failed", "cancelled") for job in jobs):
    time.sleep(0.2)
manager.shutdown(wait=True, timeout=30)
""",
    "00404e7": """
import time
from server.class_message import ClassMessageStore
from server.guesses import GuessStore
from server.history import HistoryStore
from server.identity import LearnerStore
from server.instructor import InstructorPass
from server.jobs import JobManager
from server.kinds import KindRule, KindStore
from server.presets import PresetStore
from server.records import JobSpec
from server.settings import Settings
from trainer.config import RunConfig

def tiny(precision, seed=0):
    return RunConfig(precision=precision, epochs=1, batch_size=64, data="synthetic", loader="resident", subset=256,
                     test_subset=128, num_workers=0, device="cpu", seed=seed)

settings = Settings(state_dir=STATE, data_root=STATE + "/data", device="cpu", class_mode=False)
history = HistoryStore(settings.history_path)
learners = LearnerStore(history)
ada, _ = learners.create("Ada")
bob, _ = learners.create()
cy = learners.signed_in("subject-cy", "Cy Signed", "cy@example.edu")
guesses = GuessStore(history)
guesses.lock(ada.id, "run-speedup", "How many times as fast will AMP train?", 1.5)
guesses.lock(bob.id, "run-speedup", "How many times as fast will AMP train?", None)
guesses.lock(cy.id, "underflow", "How many gradients underflow?", 40.0)
ClassMessageStore(history).set("Back in 5 minutes")
PresetStore(history).set("epochs=1&batch_size=128")
KindStore(history).set({"sweep": KindRule(True, 1)})
InstructorPass(history)
manager = JobManager(settings, history)
jobs = [manager.submit(ada.id, JobSpec("compare", [tiny("fp32"), tiny("amp-bf16")], "ada's comparison")),
        manager.submit(cy.id, JobSpec("run", [tiny("fp32", 1)], "cy's run")),
        manager.submit(bob.id, JobSpec("run", [tiny("fp32", 2)], "bob's cancelled run"))]
manager.cancel(jobs[2], bob.id)
while not all(manager.get(job).status in ("done", "failed", "cancelled") for job in jobs):
    time.sleep(0.2)
manager.shutdown(wait=True, timeout=30)
""",
}


def main(commit: str, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        state = Path(tree) / "state"
        subprocess.run([sys.executable, "-c", f"STATE = {str(state)!r}\n" + WRITERS[commit]], cwd=tree, check=True)
        with sqlite3.connect(state / "history.sqlite3") as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            dump = "\n".join(db.iterdump())
    out.write_text(f"-- The history file that commit {commit}'s code wrote (tests/server/old_states/make_old_state.py)"
                   f".\n{dump}\nPRAGMA user_version = {version};\n")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
