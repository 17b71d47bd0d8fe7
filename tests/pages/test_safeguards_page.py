"""AppTest for the page of AMP without its safeguards: it queues a labelled pair through the door, reads a finished
pair's counts, and its deliberate failures stay off Results."""

import pytest

from server.history import HistoryStore
from server.offer import Offer
from server.settings import Settings
from tests.app_testing import app, charts, open_page, state_dir, texts  # noqa: F401 (fixtures)
from tests.ui_fixtures import counted_result, finished_job
from trainer.capabilities import DeviceFacts, mode_support


@pytest.fixture(autouse=True)
def jobs_on_the_cpu(monkeypatch):
    monkeypatch.setenv("AMP_LAB_DEVICE", "cpu")


def save_pair(state_dir, safeguard: str, guarded, failure) -> str:
    """A finished pair from the lesson, saved as the job manager would, under the lesson's own label."""
    label = Offer(Settings(device="cpu"), mode_support(DeviceFacts("cpu"))).safeguard_demo(safeguard, 16).label
    job = finished_job(f"pair-{safeguard}", [guarded, failure], label, purpose="safeguards")
    HistoryStore(state_dir / "history.sqlite3").save_job(job)
    return job.id


def test_the_page_queues_a_labelled_pair_through_the_door(app):
    open_page(app, "safeguards")
    assert app.title[0].value == "AMP without its safeguards"
    assert "1 + 0.0001 = **1**" in " ".join(texts(app.markdown))
    next(b for b in app.button if b.label == "Run amp-fp16 with and without its scaler").click().run()
    assert not app.exception
    from ui import server_bundle

    manager = server_bundle._job_manager_for(server_bundle._settings_environment())
    job = manager.get(app.session_state["safeguards_no_scaler_job"])
    assert job.spec.purpose == "safeguards" and job.label.startswith("deliberate failure, without the GradScaler")
    assert [run.precision for run in job.spec.runs] == ["amp-fp16", "amp-fp16-unscaled"]
    assert {run.loss_shrink_log2 for run in job.spec.runs} == {16}
    assert manager.cancel(job.id, app.session_state["amp_lab_learner"].id)


def test_finished_pairs_show_what_each_safeguard_kept_and_stay_off_results(state_dir, app):
    job_id = save_pair(state_dir, "no-scaler", counted_result("amp-fp16", 300, 0, 1.9, loss_shrink_log2=16),
                       counted_result("amp-fp16-unscaled", 950, 0, 2.29, loss_shrink_log2=16))
    save_pair(state_dir, "no-master-weights", counted_result("amp-fp16", 300, 0, 1.9),
              counted_result("fp16-true", 300, 150, 2.1))
    open_page(app, "safeguards")
    metrics = {metric.label: metric.value for metric in app.metric}
    assert metrics["Zero gradients with the scaler"] == "30.0%"
    assert metrics["Zero gradients without it"] == "95.0%"
    assert metrics["Updates rounded away with fp32 master weights"] == "0.000%"
    assert metrics["Updates rounded away in pure fp16"] == "25.0%"
    markdown = " ".join(texts(app.markdown))
    assert "With the loss times 2^-16, 95.0% of the gradient elements were exactly zero" in markdown
    assert "underflow zeroed about 65.0% of them" in markdown
    assert "The loss ended at 2.290 without the scaler and at 1.900 with it." in markdown
    assert "With the weights in fp16, 25.0% of the updates" in markdown
    assert len(charts(app)) == 4  # each pair: its counted share per step and its loss
    assert "deliberate failure" in " ".join(texts(app.caption))

    open_page(app, "results")
    app.radio(key="results_whose").set_value("Whole class").run()  # the class's pairs are not comparisons
    assert "No comparison has finished on this server yet" in " ".join(texts(app.info))
    app.query_params["job"] = job_id
    open_page(app, "results")
    assert any("This pair is a deliberate failure" in warning.value for warning in app.warning)
