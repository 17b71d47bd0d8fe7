"""JobSpec's checks: a comparison is one pair of runs or up to MAX_COMPARE_PAIRS pairs, alternating baseline and
candidate, which differ in precision alone; each problem is one line."""

import pytest

from server.records import MAX_COMPARE_PAIRS, JobSpec
from trainer.config import RunConfig
from trainer.errors import ConfigError


def pair(**changes) -> list[RunConfig]:
    common = {"epochs": 1, "batch_size": 64, "data": "synthetic", "subset": 256, **changes}
    return [RunConfig(precision="fp32", **common), RunConfig(precision="amp-bf16", **common)]


def refused(runs: list[RunConfig]) -> str:
    with pytest.raises(ConfigError) as caught:
        JobSpec("compare", runs).check_shape()
    assert "\n" not in str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize("pairs", range(1, MAX_COMPARE_PAIRS + 1))
def test_a_comparison_takes_one_to_the_most_pairs(pairs):
    spec = JobSpec("compare", pair() * pairs).check_shape()
    assert [run.precision for run in spec.runs] == ["fp32", "amp-bf16"] * pairs


def test_too_few_or_too_many_runs_are_refused():
    assert refused(pair()[:1]) == (
        f"a compare job needs 2 runs (a baseline and a candidate) or up to {MAX_COMPARE_PAIRS} such pairs, got 1"
    )
    too_many = pair() * (MAX_COMPARE_PAIRS + 1)
    assert refused(too_many).endswith(f"got {2 * MAX_COMPARE_PAIRS + 2}")


def test_an_odd_count_is_refused():
    assert refused(pair() + pair()[:1]) == "a compare job's runs come in pairs (baseline, candidate), got 3 runs"


def test_a_baseline_and_candidate_that_differ_beyond_precision_are_refused():
    fp32, _ = pair()
    _, amp = pair(batch_size=128, epochs=2)
    assert refused([fp32, amp]) == (
        "a compare job's baseline and candidate may differ only in precision, not in epochs, batch_size"
    )


def test_a_repeated_pair_must_repeat_the_first_unchanged():
    first = pair()
    assert refused(first + pair(seed=1)) == "run 3 of a compare job must repeat the baseline (run 1) unchanged"
    assert refused(first + first[:1] + [first[0]]) == (
        "run 4 of a compare job must repeat the candidate (run 2) unchanged"
    )
    assert refused(first + first[::-1]) == "run 3 of a compare job must repeat the baseline (run 1) unchanged"


def test_other_kinds_keep_their_counts():
    JobSpec("breakdown", [RunConfig(loader="dataloader"), RunConfig(loader="resident")]).check_shape()  # not a pair
    with pytest.raises(ConfigError, match="a run job needs 1 run, got 2"):
        JobSpec("run", pair()).check_shape()
