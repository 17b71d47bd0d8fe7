"""The reference results in reference/: each loads, is labelled with machine, date and settings, and is a CPU
or GPU comparison of fp32 against an AMP mode with the same settings."""

import json

from ui.interpret import differences
from ui.reference import REFERENCE_DIR, load_references


def test_every_listed_reference_loads_and_is_labelled():
    listed = json.loads((REFERENCE_DIR / "index.json").read_text())
    found = load_references()
    assert len(found) == len(listed) >= 1
    for reference in found:
        assert reference.baseline.precision == "fp32" and reference.candidate.precision.startswith("amp-")
        assert differences(reference.baseline, reference.candidate) == []
        assert reference.command.startswith("python -m trainer compare") and reference.note
        env = reference.baseline.environment
        assert reference.label.startswith(f"{env['device_name']} ({env['logical_cores']} cores, {env['device_type']}) "
                                          f"· {reference.baseline.started_at[:10]} · FP32 vs AMP")
    assert load_references(device_type="cuda") == []


def test_no_index_means_no_references(tmp_path):
    assert load_references(tmp_path) == []
