import numpy as np
import pytest

from lessons.underflow import (
    FP16_MAX,
    FP16_SMALLEST_NORMAL,
    FP16_SMALLEST_SUBNORMAL,
    log2_histogram,
    safe_scale_exponents,
    scale_outcome,
    scale_sweep,
)


def crafted():
    """Ten values with a known fate in fp16 (4 vanish, 2 are subnormal, 4 are normal), plus two zeros."""
    vanish = [2.0**-30, -(2.0**-28), 2.0**-26, 2.0**-25]  # 2^-25 is a tie with 2^-24 and rounds to even (0)
    subnormal = [2.0**-20, -(2.0**-16)]
    normal = [2.0**-10, 0.5, -3.0]
    large = [3000.0]  # overflows from a scale of 2^5 on (96000 > 65504)
    return np.array(vanish + subnormal + normal + large + [0.0, 0.0], dtype=np.float32)


def test_thresholds_are_fp16s():
    assert FP16_SMALLEST_SUBNORMAL == float(np.finfo(np.float16).smallest_subnormal)
    assert FP16_SMALLEST_NORMAL == float(np.finfo(np.float16).smallest_normal)
    assert FP16_MAX == float(np.finfo(np.float16).max)


def test_fractions_without_scaling():
    outcome = scale_outcome(crafted())
    assert (outcome.total, outcome.nonzero) == (12, 10)
    assert outcome.underflow == 4 and outcome.underflow_fraction == pytest.approx(0.4)
    assert outcome.subnormal == 2 and outcome.overflow == 0


def test_a_scale_rescues_small_values_and_overflows_large_ones():
    # x 2^4: only 2^-30 stays at or below 2^-25; 2^-28, 2^-26, 2^-25 and 2^-20 land among the subnormals.
    rescued = scale_outcome(crafted(), 2.0**4)
    assert rescued.underflow == 1 and rescued.overflow == 0
    assert rescued.subnormal == 4
    # x 2^5: 3000 becomes 96000 > 65504 (inf), and 2^-30 becomes 2^-25, still a tie that rounds to zero.
    too_big = scale_outcome(crafted(), 2.0**5)
    assert too_big.overflow == 1 and too_big.overflow_fraction == pytest.approx(0.1)
    assert too_big.underflow == 1


def test_sweep_and_safe_scales():
    outcomes = scale_sweep(crafted(), max_exponent=6)
    assert [o.scale for o in outcomes] == [2.0**k for k in range(7)]
    underflows = [o.underflow for o in outcomes]
    assert underflows == sorted(underflows, reverse=True)
    overflowing = [k for k, o in enumerate(outcomes) if o.overflow]
    assert overflowing == [5, 6]
    assert safe_scale_exponents(outcomes) == [4]


def test_log2_histogram_leaves_out_zeros():
    bins = log2_histogram(np.array([0.0, 0.75, 0.5, 2.0**-20, -(2.0**-20), 3.0]))
    counts = {b.log2_low: b.count for b in bins}
    assert counts[-1] == 2 and counts[-20] == 2 and counts[1] == 1
    assert sum(counts.values()) == 5 and bins[0].log2_low == -20 and bins[-1].log2_low == 1
    assert sum(b.fraction for b in bins) == pytest.approx(1.0)


def test_accepts_a_dict_of_layers_and_refuses_bad_scales():
    layers = {"a": np.array([2.0**-30]), "b": np.array([1.0, 0.0])}
    assert scale_outcome(layers).underflow == 1
    with pytest.raises(ValueError):
        scale_outcome(layers, 0.0)


def test_fp16_overflow_threshold_is_where_a_cast_gives_inf():
    import numpy as np

    from lessons.underflow import FP16_MAX, FP16_OVERFLOW

    assert np.float16(FP16_OVERFLOW - 1) == FP16_MAX
    with np.errstate(over="ignore"):  # the overflow is what is tested; numpy's warning about it is expected
        assert np.isinf(np.float16(FP16_OVERFLOW))


def test_only_values_at_or_below_half_the_smallest_subnormal_vanish_and_only_65520_up_overflows():
    # Between 2^-25 and 2^-24 a value rounds up to the smallest subnormal; between 65504 and 65520, down to 65504.
    outcome = scale_outcome(np.array([2.0**-25, 1.5 * 2.0**-25, 65519.0, 65520.0], dtype=np.float32))
    assert (outcome.underflow, outcome.subnormal, outcome.overflow) == (1, 1, 1)


def test_the_default_scale_is_read_from_torch_and_the_search_is_counted_in_halvings():
    from lessons.underflow import FP16_OVERFLOW, default_init_scale, search_skips

    assert default_init_scale() == 2.0**16
    assert search_skips(0.037, 2.0**24) == 4  # 620,757 -> 310,378 -> 155,189 -> 77,595 -> 38,797 < 65,520
    assert search_skips(0.037, 2.0**16) == 0 and search_skips(0.0, 2.0**24) == 0
    assert search_skips(FP16_OVERFLOW / 2**20, 2.0**24) == 5  # 4 halvings reach 65,520 exactly: still inf
