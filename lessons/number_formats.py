"""How fp32, fp16 and bf16 store a number: bit layout, stored value, rounding error and range.

Everything is read from real tensors (a value cast to the format, then viewed as an integer), so the
page shows what PyTorch actually stores, not a textbook formula.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import torch

from trainer.errors import ConfigError


@dataclass(frozen=True)
class FloatFormat:
    """One IEEE-style binary format: 1 sign bit, `exponent_bits`, `mantissa_bits` (stored fraction)."""

    name: str  # fp32 | fp16 | bf16
    dtype: torch.dtype
    int_dtype: torch.dtype  # same width, for viewing the raw bits
    exponent_bits: int
    mantissa_bits: int

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1


FORMATS = {
    "fp32": FloatFormat("fp32", torch.float32, torch.int32, 8, 23),
    "fp16": FloatFormat("fp16", torch.float16, torch.int16, 5, 10),
    "bf16": FloatFormat("bf16", torch.bfloat16, torch.int16, 8, 7),
}

KINDS = ("normal", "subnormal", "zero", "inf", "nan")


@dataclass
class BitLayout:
    """A value as one format stores it."""

    format: str
    value: float  # what the learner asked for
    stored: float  # what the format keeps (round to nearest even)
    sign: str  # bit strings, most significant bit first
    exponent: str
    mantissa: str
    kind: str  # normal | subnormal | zero | inf | nan
    relative_error: float | None  # |stored - value| / |value|; None when undefined (NaN input)
    spacing: float | None  # gap to the next larger representable magnitude; None for inf/nan

    @property
    def bit_string(self) -> str:
        return self.sign + self.exponent + self.mantissa

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FormatRange:
    """The landmarks of one format's range."""

    format: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    smallest_subnormal: float
    smallest_normal: float
    largest: float
    epsilon: float  # spacing between 1 and the next representable number
    decimal_digits: float  # about how many significant decimal digits survive

    def to_dict(self) -> dict:
        return asdict(self)


def get_format(name: str) -> FloatFormat:
    if name not in FORMATS:
        raise ConfigError(f"unknown number format {name!r}: choose one of {', '.join(FORMATS)}")
    return FORMATS[name]


def encode(value: float, format_name: str) -> BitLayout:
    """Cast `value` to the format and read back its bits, stored value, kind and rounding error."""
    fmt = get_format(format_name)
    # Start from float64 so the only rounding is the one into the target format.
    stored_tensor = torch.tensor([value], dtype=torch.float64).to(fmt.dtype)
    raw = _unsigned_bits(stored_tensor, fmt)
    bits = format(raw, f"0{fmt.bits}b")
    sign, exponent, mantissa = bits[0], bits[1 : 1 + fmt.exponent_bits], bits[1 + fmt.exponent_bits :]
    stored = float(stored_tensor.item())
    return BitLayout(
        format=fmt.name,
        value=float(value),
        stored=stored,
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        kind=_classify(exponent, mantissa),
        relative_error=_relative_error(float(value), stored),
        spacing=_spacing(stored_tensor, fmt),
    )


def encode_all(value: float) -> list[BitLayout]:
    """The value in every format, fp32 first."""
    return [encode(value, name) for name in FORMATS]


def format_range(format_name: str) -> FormatRange:
    """Range landmarks computed from the bit layout (the tests check them against torch.finfo)."""
    fmt = get_format(format_name)
    min_exponent = 1 - fmt.bias
    smallest_normal = 2.0**min_exponent
    smallest_subnormal = 2.0 ** (min_exponent - fmt.mantissa_bits)
    largest = (2.0 - 2.0**-fmt.mantissa_bits) * 2.0**fmt.bias
    epsilon = 2.0**-fmt.mantissa_bits
    return FormatRange(
        format=fmt.name,
        bits=fmt.bits,
        exponent_bits=fmt.exponent_bits,
        mantissa_bits=fmt.mantissa_bits,
        smallest_subnormal=smallest_subnormal,
        smallest_normal=smallest_normal,
        largest=largest,
        epsilon=epsilon,
        decimal_digits=round((fmt.mantissa_bits + 1) * math.log10(2), 1),
    )


def format_table() -> list[FormatRange]:
    return [format_range(name) for name in FORMATS]


_FRACTION = re.compile(r"^\s*([-+]?[0-9.eE+-]+)\s*/\s*([-+]?[0-9.eE+-]+)\s*$")
_POWER = re.compile(r"^\s*([-+]?)2\s*(?:\^|\*\*)\s*([-+]?\d+)\s*$")


def parse_value(text: str) -> float:
    """Read a number typed by a learner: `0.1`, `1e-5`, `inf`, `1/3` or `2^-24` (never evaluated as code)."""
    power = _POWER.match(text)
    if power:
        exponent = int(power.group(2))
        if abs(exponent) > 1100:
            raise ConfigError(f"2^{exponent} is outside what these formats can show: keep the exponent within ±1100")
        sign = -1.0 if power.group(1) == "-" else 1.0
        return sign * math.ldexp(1.0, exponent)
    fraction = _FRACTION.match(text)
    try:
        if fraction:
            numerator, denominator = float(fraction.group(1)), float(fraction.group(2))
            if denominator == 0:
                raise ConfigError("division by zero: type a fraction with a non-zero denominator, such as 1/3")
            return numerator / denominator
        return float(text.strip())
    except ValueError:
        raise ConfigError(f"{text!r} is not a number: type something like 0.1, 1e-5, 1/3 or 2^-24") from None


def _unsigned_bits(stored: torch.Tensor, fmt: FloatFormat) -> int:
    return int(stored.view(fmt.int_dtype).item()) & ((1 << fmt.bits) - 1)


def _classify(exponent: str, mantissa: str) -> str:
    fraction_zero = "1" not in mantissa
    if "0" not in exponent:
        return "inf" if fraction_zero else "nan"
    if "1" not in exponent:
        return "zero" if fraction_zero else "subnormal"
    return "normal"


def _relative_error(value: float, stored: float) -> float | None:
    if math.isnan(value):
        return None
    if value == stored:
        return 0.0
    if math.isinf(stored) or math.isinf(value):
        return math.inf
    return abs(stored - value) / abs(value)


def _spacing(stored: torch.Tensor, fmt: FloatFormat) -> float | None:
    """Distance from |stored| to the next representable magnitude: one step of the last mantissa bit."""
    magnitude = stored.abs()
    if not torch.isfinite(magnitude).item():
        return None
    raw = magnitude.view(fmt.int_dtype)
    following = (raw + 1).view(fmt.dtype)  # adding 1 to the raw bits moves to the next larger magnitude
    return float(following.double().item() - magnitude.double().item())
