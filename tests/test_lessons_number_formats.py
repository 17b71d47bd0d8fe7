import math

import pytest
import torch

from lessons.number_formats import FORMATS, encode, encode_all, format_range, format_table, parse_value
from trainer.errors import ConfigError

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("name", list(FORMATS))
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
    assert [r.format for r in format_table()] == ["fp32", "fp16", "bf16"]


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


@pytest.mark.parametrize("name", list(FORMATS))
def test_one_third_is_rounded_to_the_torch_value_with_error_below_half_epsilon(name):
    layout = encode(1 / 3, name)
    expected = torch.tensor([1 / 3], dtype=torch.float64).to(DTYPES[name]).item()
    assert layout.stored == expected
    assert 0 < layout.relative_error <= torch.finfo(DTYPES[name]).eps / 2
    # 1/3 = 1.0101...b x 2^-2: the exponent field holds -2 + bias and the mantissa alternates.
    fmt = FORMATS[name]
    assert int(layout.exponent, 2) == fmt.bias - 2
    assert layout.mantissa.startswith("010101")


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
    for name in FORMATS:
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
