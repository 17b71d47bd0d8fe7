"""A synthetic split prepared once (the GPU kit's step 3) gives a run the very pixels it would have generated."""

import numpy as np
import pytest

from trainer import synthetic
from trainer.config import RunConfig
from trainer.loaders import load_split

# More than one chunk (1000 images), so that reading the prefix crosses a chunk boundary.
PREPARED_TRAIN, PREPARED_TEST = 1200, 300


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prepared")
    written = synthetic.prepare_synthetic(folder, seed=0, train_limit=PREPARED_TRAIN, test_limit=PREPARED_TEST)
    assert sorted(path.name for path in folder.iterdir()) == sorted(path.name for path in written)
    return folder


def assert_same_split(read, generated) -> None:
    np.testing.assert_array_equal(read.images, generated.images)
    np.testing.assert_array_equal(read.labels, generated.labels)
    assert (read.images.dtype, read.labels.dtype, read.classes, read.source) == (
        generated.images.dtype, generated.labels.dtype, generated.classes, generated.source)


@pytest.mark.parametrize("train, limit", [(True, 1001), (True, PREPARED_TRAIN), (False, 37)])
def test_a_run_reading_the_prepared_split_gets_bit_identical_images(prepared, train, limit):
    read = load_split("synthetic", str(prepared), train=train, limit=limit)
    assert_same_split(read, synthetic.make_synthetic(train, limit=limit))
    assert synthetic.read_prepared(prepared, train, limit, seed=0) is not None  # it was read, not generated


def test_more_images_than_were_prepared_are_generated_alike(prepared):
    assert synthetic.read_prepared(prepared, True, PREPARED_TRAIN + 1, seed=0) is None
    assert_same_split(load_split("synthetic", str(prepared), train=True, limit=PREPARED_TRAIN + 1),
                      synthetic.make_synthetic(True, limit=PREPARED_TRAIN + 1))


def test_another_seed_is_not_read_from_a_split_prepared_for_seed_0(prepared):
    assert synthetic.read_prepared(prepared, True, 10, seed=1) is None
    assert_same_split(load_split("synthetic", str(prepared), train=True, limit=10, seed=1),
                      synthetic.make_synthetic(True, limit=10, seed=1))


def test_a_damaged_prepared_file_is_ignored_and_the_split_generated(tmp_path):
    synthetic.prepare_synthetic(tmp_path, train_limit=20, test_limit=10)
    path = synthetic.prepared_path(tmp_path, True, 0)
    path.write_bytes(path.read_bytes()[:200])  # cut short, as a full disk or a killed copy would leave it
    assert synthetic.read_prepared(tmp_path, True, 20, seed=0) is None
    assert_same_split(load_split("synthetic", str(tmp_path), train=True, limit=20),
                      synthetic.make_synthetic(True, limit=20))


def test_a_file_prepared_by_another_generator_is_never_read(tmp_path, monkeypatch):
    """Its name carries the generator's version: pixels from an older synthetic.py must not pass for this one's."""
    synthetic.prepare_synthetic(tmp_path, train_limit=20, test_limit=10)
    path = synthetic.prepared_path(tmp_path, True, 0)
    with np.load(path) as saved:
        labels = saved["labels"]
    with open(path, "wb") as handle:  # the same name, other pixels: what an older generator might have made
        np.savez(handle, images=np.zeros((20, 32, 32, 3), np.uint8), labels=labels)
    assert (synthetic.read_prepared(tmp_path, True, 20, seed=0).images == 0).all()  # read under its own name
    monkeypatch.setattr(synthetic, "_generator_version", lambda: "other-version")
    assert synthetic.read_prepared(tmp_path, True, 20, seed=0) is None


def test_a_data_root_without_a_prepared_split_generates_as_before(tmp_path):
    assert_same_split(load_split("synthetic", str(tmp_path / "absent"), train=False, limit=15),
                      synthetic.make_synthetic(False, limit=15))


@pytest.mark.slow
def test_a_training_run_on_the_prepared_split_ends_exactly_as_one_that_generates_it(prepared, monkeypatch):
    from trainer.run import run_training

    common = dict(precision="fp32", epochs=1, batch_size=32, data="synthetic", loader="resident", subset=64,
                  test_subset=32, device="cpu", warmup_steps=1, log_every=1)
    generated = run_training(RunConfig(**common))

    def no_generating(*args):
        raise AssertionError("the run generated its split instead of reading the prepared one")

    monkeypatch.setattr(synthetic, "_generate", no_generating)
    read = run_training(RunConfig(**common, data_root=str(prepared)))
    assert read.epoch_losses == generated.epoch_losses
    assert [p["loss"] for p in read.loss_history] == [p["loss"] for p in generated.loss_history]
    assert read.test_accuracy == generated.test_accuracy
