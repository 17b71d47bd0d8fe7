"""The reference results in reference/: each loads, is labelled with machine, date and settings, says what it is
for, and is a CPU or GPU comparison of fp32 against an AMP mode with the same settings."""

import json

import pytest

from lessons.verdicts import differences
from ui.reference import (
    PURPOSES,
    REFERENCE_DIR,
    load_references,
    newest_ladders,
    reference_rows,
    reference_sweep,
)
from ui.widgets import ladder_caption


def test_every_listed_reference_loads_and_is_labelled():
    listed = json.loads((REFERENCE_DIR / "index.json").read_text())
    found = load_references()
    assert len(found) == len(listed) >= 1
    for reference in found:
        assert reference.baseline.precision == "fp32" and reference.candidate.precision.startswith("amp-")
        assert differences(reference.baseline, reference.candidate) == []
        assert reference.command.startswith("python -m trainer compare") and reference.note
        assert reference.purpose in PURPOSES
        env = reference.baseline.environment
        assert reference.label.startswith(f"{env['device_name']} ({env['logical_cores']} cores, {env['device_type']}) "
                                          f"· {reference.baseline.started_at[:10]} · FP32 vs AMP")
    assert load_references(device_type="cuda") == []


def test_the_purpose_picks_the_quick_demo_or_the_sweep_points():
    (demo,) = load_references(device_type="cpu", purpose="quick-demo")
    assert demo.baseline.config.subset == 5000 and demo.baseline.config.batch_size == 128
    sweep = load_references(device_type="cpu", purpose="sweep")
    assert len(sweep) >= 2 and all(r.purpose == "sweep" for r in sweep)
    assert len(sweep) + 1 == len(load_references(device_type="cpu"))


def test_the_reference_sweep_is_the_sweep_points_by_batch_size_with_amps_speedup():
    sweep = reference_sweep("cpu")
    assert sweep == sorted(load_references(device_type="cpu", purpose="sweep"),
                           key=lambda r: r.baseline.config.batch_size)
    assert [r.baseline.config.batch_size for r in sweep] == [16, 32, 64]
    rows = reference_rows(sweep)
    assert [(row.precision, row.batch_size) for row in rows] == [
        (p, b) for b in (16, 32, 64) for p in ("fp32", "amp-bf16")]
    largest = sweep[-1]
    assert rows[-1].speedup == pytest.approx(
        largest.candidate.steady_images_per_s / largest.baseline.steady_images_per_s)
    assert reference_sweep("cuda") == []


def test_an_index_entry_without_a_known_purpose_is_named(tmp_path):
    entry = json.loads((REFERENCE_DIR / "index.json").read_text())[0]
    (tmp_path / entry["file"]).write_text((REFERENCE_DIR / entry["file"]).read_text())
    (tmp_path / "index.json").write_text(json.dumps([{**entry, "purpose": "demo"}]))
    with pytest.raises(ValueError, match="cpu-2026-11-30-quick-demo.json has purpose 'demo'; choose one of "
                                         "quick-demo, sweep"):
        load_references(tmp_path)


def test_no_index_means_no_references(tmp_path):
    assert load_references(tmp_path) == []


def test_a_ladder_answers_only_for_its_class_of_machine_the_newest_of_that_class(tmp_path):
    """Issue 32: the ladder is filtered by machine class like every other reference; an older ladder of the same
    class, one that does not say its machine, and an unreadable file are not shown."""
    recorded = json.loads(next(REFERENCE_DIR.glob("ladder-cpu-*.json")).read_text())
    avx512 = {"device_type": "cpu", "device_name": "AMD EPYC", "cpu_flags": ["avx512f", "avx512_bf16"]}
    amx = {"device_type": "cpu", "device_name": "Xeon", "cpu_flags": ["amx_tile", "amx_bf16"]}
    h200 = {"device_type": "cuda", "device_name": "NVIDIA H200", "cpu_flags": []}
    for name, environment in (("ladder-cpu-2026-11-01.json", avx512), ("ladder-cpu-2026-12-02.json", avx512),
                              ("ladder-cpu-2026-12-03.json", amx), ("ladder-cuda-2026-12-03.json", h200),
                              ("ladder-cpu-2026-12-05.json", None)):
        (tmp_path / name).write_text(json.dumps({**recorded, "environment": environment}))
    (tmp_path / "ladder-cuda-2026-12-04.json").write_text("{not json")
    assert [ladder["file"] for ladder in newest_ladders(tmp_path, like=avx512)] == ["ladder-cpu-2026-12-02.json"]
    assert [ladder["file"] for ladder in newest_ladders(tmp_path, like=h200)] == ["ladder-cuda-2026-12-03.json"]
    no_bf16 = {"device_type": "cpu", "device_name": "old", "cpu_flags": []}
    assert newest_ladders(tmp_path, like=no_bf16) == []


def test_a_ladder_caption_counts_the_rounds_that_ran_not_those_planned():
    recorded = json.loads(next(REFERENCE_DIR.glob("ladder-cpu-*.json")).read_text())
    cut = {**recorded, "file": "ladder-cuda.json", "repeats": 3}
    assert ", 2 of 3 rounds over the rungs; ladder-cuda.json." in ladder_caption(cut)  # the recorded ladder ran 2
