"""Which kinds of job a class may queue, and how many each learner may: the settings' mode, and a policy's rules."""

import pytest

from server.kinds import CLASS_MODE, OPEN_MODE, PAGE_KINDS, KindPolicy, parse_rules
from trainer.errors import ConfigError


def test_class_mode_turns_the_long_kinds_off_and_caps_the_rest_per_learner():
    policy = KindPolicy.for_mode(class_mode=True)
    assert policy.refusal("sweep", 0) == "the instructor has turned batch-size sweeps off for this class"
    assert policy.refusal("breakdown", 0) == "the instructor has turned time breakdowns off for this class"
    assert policy.refusal("quick-demo", 0) is None
    assert policy.refusal("quick-demo", 1) == "this class allows one of its quick demos per learner, and you have had 1"
    assert policy.refusal("comparison", 1) is None
    assert policy.refusal("comparison", 2) == "this class allows 2 of its comparisons per learner, and you have had 2"
    assert policy.refusal("safeguards", 1) is None  # one pair per safeguard
    assert policy.refusal("safeguards", 2) == ("this class allows 2 of its runs without AMP's safeguards per learner, "
                                               "and you have had 2")
    assert set(CLASS_MODE) == set(OPEN_MODE) and set(PAGE_KINDS) < set(CLASS_MODE)


def test_open_mode_allows_every_kind_as_often_as_the_queue_limits_do():
    policy = KindPolicy.for_mode(class_mode=False)
    assert all(policy.refusal(purpose, 1000) is None for purpose in OPEN_MODE)


@pytest.mark.parametrize(
    ("rules", "problem"),
    [({"fishing": {"enabled": True}}, "unknown kind of job 'fishing'"),
     ({"sweep": {"enabled": "yes"}}, "on or off"),
     ({"sweep": {"per_learner": 0}}, "from 1 to 100"),
     ({"sweep": {"colour": "red"}}, "the keys enabled and per_learner"),
     (["sweep"], "a table of purpose")],
)
def test_a_bad_policy_is_refused_in_one_line(rules, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_rules(rules)
