import math

import pytest
import torch

from lessons.number_formats import FORMATS, encode, encode_all, format_range, format_table, parse_value
from trainer.errors import ConfigError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2}
TORCH_FORMATS = [name for name in FORMATS if name in DTYPES]  # all but tf32, which torch has no dtype for


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_format_table_matches_torch_finfo(name):
    landmarks = format_range(name)
    info = torch.finfo(DTYPES[name])
    assert landmarks.bits == info.bits
    assert landmarks.smallest_normal == info.smallest_normal
    assert landmarks.largest == info.max
    assert landmarks.epsilon == info.eps
    # The smallest subnormal is the smallest normal shifted right by every mantissa bit; torch stores it.
    smallest = torch.tensor([landmarks.smallest_subnormal], dtype=torch.float64).to(DTYPES[name])
    assert smallest.item() == landmarks.smallest_subnormal
    half_of_it = torch.tensor([landmarks.smallest_subnormal / 2], dtype=torch.float64).to(DTYPES[name])
    assert half_of_it.item() == 0.0  # a tie rounds to even: zero


def test_fp16_landmarks_are_the_known_ones():
    fp16 = format_range("fp16")
    assert (fp16.smallest_subnormal, fp16.smallest_normal, fp16.largest) == (2.0**-24, 2.0**-14, 65504.0)
    assert fp16.overflow_from == 65520.0 and fp16.on_overflow == "inf"  # 65519 still rounds to 65504
    assert fp16.overflow_at_midpoint  # 65504's mantissa is all ones: the tie goes up, to inf
    assert encode(65519.0, "fp16").stored == 65504.0 and encode(65520.0, "fp16").kind == "inf"


def test_the_ladder_runs_from_fp32_to_fp8():
    assert [r.format for r in format_table()] == ["fp32", "tf32", "bf16", "fp16", "fp8-e4m3", "fp8-e5m2"]
    assert [r.bits for r in format_table()] == [32, 19, 16, 16, 8, 8]


def test_fp8_rows_come_from_torch():
    e4m3, e5m2 = format_range("fp8-e4m3"), format_range("fp8-e5m2")
    assert (e4m3.exponent_bits, e4m3.mantissa_bits, e4m3.largest) == (4, 3, 448.0)
    assert (e5m2.exponent_bits, e5m2.mantissa_bits, e5m2.largest) == (5, 2, 57344.0)
    assert e4m3.source == "torch.finfo(torch.float8_e4m3fn)"
    assert e5m2.smallest_subnormal == 2.0**-16 and e4m3.smallest_subnormal == 2.0**-9
    # e5m2 has an infinity; e4m3fn does not.
    assert e5m2.on_overflow == "inf" and encode(61440.0, "fp8-e5m2").kind == "inf"
    assert encode(57343.0, "fp8-e5m2").stored == 57344.0 and e5m2.overflow_at_midpoint
    # e4m3's midpoint, 464, is a tie that goes to 448 (its mantissa 110 is even): only past it does a cast overflow.
    assert e4m3.overflow_from == 464.0 and not e4m3.overflow_at_midpoint and encode(464.0, "fp8-e4m3").stored == 448.0
    # Past it, torch 2.14.1 clamps to 448 and torch 2.11 gives NaN (seen in make gpu-rehearsal's torch): the row
    # says what this torch does, asked of the cast itself far past the range.
    far = encode(1e6, "fp8-e4m3")
    if math.isnan(torch.tensor([470.0]).to(torch.float8_e4m3fn).item()):
        assert e4m3.on_overflow == "nan" and far.kind == "nan" and not far.saturated
    else:
        assert e4m3.on_overflow == "largest"
        assert far.stored == 448.0 and far.saturated and far.bit_string == "01111110"
    assert encode(float("nan"), "fp8-e4m3").bit_string == "01111111"
    assert not encode(448.0, "fp8-e4m3").saturated and encode(448.0, "fp8-e4m3").spacing is None


def test_tf32_row_is_fp32_range_with_fp16_precision():
    tf32, fp32, fp16 = format_range("tf32"), format_range("fp32"), format_range("fp16")
    assert (tf32.bits, tf32.exponent_bits, tf32.mantissa_bits) == (19, 8, 10)
    assert tf32.smallest_normal == fp32.smallest_normal and tf32.epsilon == fp16.epsilon
    assert tf32.largest == (2 - 2.0**-10) * 2.0**127
    assert tf32.source.startswith("the bit layout")


@pytest.mark.parametrize("value", [0.1, 1 / 3, -2.5, 1e-3, 123456.789, 1e-40])
def test_tf32_keeps_fp16_precision_with_fp32_exponent(value):
    tf32 = encode(value, "tf32")
    fp32_bits = torch.tensor([value], dtype=torch.float32).view(torch.int32).item() & 0xFFFFFFFF
    assert tf32.bit_string[:9] == format(fp32_bits, "032b")[:9]  # sign and exponent as fp32 (barring a carry)
    assert len(tf32.bit_string) == 19
    if 6.2e-5 < abs(value) < 65000:  # inside fp16's normal range the two agree bit for bit in the mantissa
        assert tf32.stored == encode(value, "fp16").stored
    assert encode(1.0, "tf32").spacing == 2.0**-10


def test_tf32_rounds_to_nearest_even_and_can_carry_into_inf():
    assert encode(1 + 2.0**-11, "tf32").stored == 1.0  # a tie goes to the even mantissa
    assert encode(1 + 3 * 2.0**-11, "tf32").stored == 1 + 2.0**-9
    assert encode(3.4e38, "tf32").kind == "normal" and encode(3.402e38, "tf32").kind == "inf"


def test_fp16_max_bits():
    layout = encode(65504.0, "fp16")
    assert (layout.sign, layout.exponent, layout.mantissa) == ("0", "11110", "1111111111")
    assert layout.stored == 65504.0 and layout.kind == "normal" and layout.relative_error == 0.0


def test_fp16_smallest_subnormal_bits():
    layout = encode(2.0**-24, "fp16")
    assert layout.bit_string == "0" + "00000" + "0000000001"
    assert layout.kind == "subnormal" and layout.stored == 2.0**-24


def test_overflow_to_inf_in_fp16_but_not_bf16():
    fp16 = encode(70000.0, "fp16")
    assert fp16.kind == "inf" and math.isinf(fp16.stored) and fp16.relative_error == math.inf
    assert fp16.bit_string == "0" + "11111" + "0" * 10
    bf16 = encode(70000.0, "bf16")
    assert bf16.kind == "normal" and bf16.stored == 70144.0


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_one_third_is_rounded_to_the_torch_value_with_error_below_half_epsilon(name):
    layout = encode(1 / 3, name)
    expected = torch.tensor([1 / 3], dtype=torch.float64).to(DTYPES[name]).item()
    assert layout.stored == expected
    assert 0 < layout.relative_error <= torch.finfo(DTYPES[name]).eps / 2
    # 1/3 = 1.0101...b x 2^-2: the exponent field holds -2 + bias and the mantissa alternates.
    fmt = FORMATS[name]
    assert int(layout.exponent, 2) == fmt.bias - 2
    assert layout.mantissa.startswith("010101"[: fmt.mantissa_bits - 1])


def test_bf16_of_1e_minus_40_is_subnormal_and_fp16_flushes_it():
    bf16 = encode(1e-40, "bf16")
    assert bf16.kind == "subnormal" and bf16.exponent == "00000000"
    assert bf16.stored == 2.0**-133  # the only set bit is the last mantissa bit
    assert bf16.mantissa == "0000001"
    assert encode(1e-40, "fp32").kind == "subnormal"
    fp16 = encode(1e-40, "fp16")
    assert fp16.kind == "zero" and fp16.stored == 0.0 and fp16.relative_error == 1.0


def test_sign_bit_of_negatives():
    for layout in encode_all(-2.5):
        assert layout.sign == "1" and layout.stored == -2.5
        assert layout.relative_error == 0.0
    assert all(layout.sign == "0" for layout in encode_all(2.5))


def test_bits_match_a_torch_integer_view():
    layout = encode(0.1, "fp32")
    raw = torch.tensor([0.1], dtype=torch.float32).view(torch.int32).item()
    assert int(layout.bit_string, 2) == raw


def test_spacing_near_one_is_epsilon_and_nan_is_classified():
    for name in TORCH_FORMATS:
        assert encode(1.0, name).spacing == torch.finfo(DTYPES[name]).eps
        nan = encode(float("nan"), name)
        assert nan.kind == "nan" and nan.relative_error is None and nan.spacing is None
    assert encode(0.0, "fp16").kind == "zero"


@pytest.mark.parametrize(
    "text,value",
    [("0.1", 0.1), ("1e-5", 1e-5), (" -3 ", -3.0), ("1/3", 1 / 3), ("2^-24", 2.0**-24), ("-2**10", -1024.0),
     ("inf", math.inf)],
)
def test_parse_value(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize("text", ["abc", "1/0", "__import__('os')", "2^5000", ""])
def test_parse_value_refuses_non_numbers(text):
    with pytest.raises(ConfigError):
        parse_value(text)


def test_unknown_format_is_a_config_error():
    with pytest.raises(ConfigError, match="fp8"):
        encode(1.0, "fp8")


def test_the_famous_limits_are_shown_exactly():
    from lessons.number_formats import exact

    largest = {r.format: exact(r.largest) for r in format_table()}
    assert (largest["fp16"], largest["fp8-e5m2"], largest["fp8-e4m3"]) == ("65504", "57344", "448")
    assert exact(3.4028234663852886e38) == "3.403e+38" and exact(2.0**-14) == "6.104e-05"
