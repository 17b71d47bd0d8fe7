"""The precision ladder (fp32, TF32, bf16, fp16, fp8 e4m3 and e5m2): bit layout, stored value, error and range.

Everything is read from real tensors (a value cast to the format, then viewed as an integer), and the ranges
from torch.finfo, so the page shows what the running PyTorch stores, not a textbook formula. TF32 is the one
exception: torch has no TF32 dtype (it is a mode of NVIDIA's Tensor Cores that reads fp32 inputs and keeps 10 of
their 23 mantissa bits), so it is modelled as an fp32 rounded to nearest-even at that width.
fp8 formats: Micikevicius et al., "FP8 Formats for Deep Learning" (2022); e4m3 has no infinity.
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

    name: str  # fp32 | tf32 | bf16 | fp16 | fp8-e4m3 | fp8-e5m2
    dtype: torch.dtype  # the tensor dtype that holds it (float32 for TF32)
    int_dtype: torch.dtype  # same width as dtype, for viewing the raw bits
    exponent_bits: int
    mantissa_bits: int
    dropped_bits: int = 0  # low bits of `dtype` the format does not keep (13 for TF32)
    has_inf: bool = True  # e4m3fn spends the all-ones exponent on numbers, and keeps only NaN
    use: str = ""

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1


# The ladder from most to fewest bits; `use` says where each one meets a training run.
FORMATS = {
    "fp32": FloatFormat("fp32", torch.float32, torch.int32, 8, 23,
                        use="weights, optimizer state and the fp32 ops of every mode"),
    "tf32": FloatFormat("tf32", torch.float32, torch.int32, 8, 10, dropped_bits=13,
                        use="inside Ampere-or-newer Tensor Cores: fp32 tensors, products on 10-bit mantissas"),
    "bf16": FloatFormat("bf16", torch.bfloat16, torch.int16, 8, 7,
                        use="autocast on CPUs and Ampere-or-newer GPUs; fp32's range, no loss scaling"),
    "fp16": FloatFormat("fp16", torch.float16, torch.int16, 5, 10,
                        use="autocast on Tensor Core GPUs; narrow range, needs loss scaling"),
    "fp8-e4m3": FloatFormat("fp8-e4m3", torch.float8_e4m3fn, torch.int8, 4, 3, has_inf=False,
                            use="fp8 training on Hopper-class GPUs: weights and activations"),
    "fp8-e5m2": FloatFormat("fp8-e5m2", torch.float8_e5m2, torch.int8, 5, 2,
                            use="fp8 training on Hopper-class GPUs: gradients (more range, less precision)"),
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
    spacing: float | None  # gap to the next larger representable magnitude; None for inf/nan and the largest
    saturated: bool = False  # too large, yet stored as the largest finite value (torch's cast to e4m3 clamps)

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
    overflow_from: float  # the midpoint between `largest` and the next step: 65520 for fp16, 464 for e4m3
    overflow_at_midpoint: bool  # whether the midpoint itself overflows (a tie goes to the even neighbour)
    on_overflow: str  # what a cast stores past it: "inf", "nan", or "largest" where torch's cast saturates
    source: str  # where the figures come from: torch.finfo(<dtype>), or the bit layout for TF32
    use: str

    def to_dict(self) -> dict:
        return asdict(self)


def get_format(name: str) -> FloatFormat:
    if name not in FORMATS:
        raise ConfigError(f"unknown number format {name!r}: choose one of {', '.join(FORMATS)}")
    return FORMATS[name]


def encode(value: float, format_name: str) -> BitLayout:
    """Cast `value` to the format and read back its bits, stored value, kind and rounding error."""
    fmt = get_format(format_name)
    # Start from float64 so the only rounding is the one into the target format (TF32: into fp32, then TF32,
    # as a Tensor Core meets an fp32 tensor).
    stored_tensor = torch.tensor([value], dtype=torch.float64).to(fmt.dtype)
    if fmt.dropped_bits:
        stored_tensor = _round_off_low_bits(stored_tensor, fmt)
    raw = _unsigned_bits(stored_tensor, fmt) >> fmt.dropped_bits
    bits = format(raw, f"0{fmt.bits}b")
    sign, exponent, mantissa = bits[0], bits[1 : 1 + fmt.exponent_bits], bits[1 + fmt.exponent_bits :]
    stored = float(stored_tensor.item())
    spacing = _spacing(stored_tensor, fmt)
    return BitLayout(
        format=fmt.name,
        value=float(value),
        stored=stored,
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        kind=_classify(exponent, mantissa, fmt.has_inf),
        relative_error=_relative_error(float(value), stored),
        spacing=spacing,
        saturated=spacing is None and math.isfinite(stored) and abs(value) > abs(stored),
    )


def encode_all(value: float) -> list[BitLayout]:
    """The value in every format, down the ladder from fp32."""
    return [encode(value, name) for name in FORMATS]


def format_range(format_name: str) -> FormatRange:
    """Range landmarks from torch.finfo where torch has the dtype, from the bit layout for TF32."""
    fmt = get_format(format_name)
    if fmt.dropped_bits:
        smallest_normal = 2.0 ** (1 - fmt.bias)
        largest = (2.0 - 2.0**-fmt.mantissa_bits) * 2.0**fmt.bias
        epsilon = 2.0**-fmt.mantissa_bits
        source = "the bit layout (torch has no TF32 dtype)"
    else:
        info = torch.finfo(fmt.dtype)
        smallest_normal, largest, epsilon = info.smallest_normal, info.max, info.eps
        source = f"torch.finfo({fmt.dtype})"
    # Values between `largest` and the midpoint to the next step round down to it. The midpoint is a tie, which goes
    # to the even mantissa: the next binade where `largest`'s mantissa is all ones (fp16, bf16, e5m2), so it
    # overflows; `largest` itself where it is not (e4m3fn's 448 is 1.110 x 2^8, since 1.111 x 2^8 encodes NaN).
    overflow_from = largest + 2.0 ** math.floor(math.log2(largest)) * epsilon / 2
    at_midpoint = encode(overflow_from, fmt.name).stored
    # What torch stores past it is this torch's own choice for e4m3fn, which has no infinity: 2.14.1 saturates to 448,
    # 2.11 gives NaN (both measured in this project, the second in `make gpu-rehearsal`'s environment). Asked at twice
    # the largest value, clear of the tie.
    beyond = encode(2 * largest, fmt.name).stored
    return FormatRange(
        format=fmt.name,
        bits=fmt.bits,
        exponent_bits=fmt.exponent_bits,
        mantissa_bits=fmt.mantissa_bits,
        smallest_subnormal=smallest_normal * epsilon,
        smallest_normal=smallest_normal,
        largest=largest,
        epsilon=epsilon,
        decimal_digits=round((fmt.mantissa_bits + 1) * math.log10(2), 1),
        overflow_from=overflow_from,
        overflow_at_midpoint=at_midpoint != largest,
        on_overflow="inf" if math.isinf(beyond) else "nan" if math.isnan(beyond) else "largest",
        source=source,
        use=fmt.use,
    )


TORCH_VERSION = torch.__version__  # the facts of the table are this torch's


def exact(value: float) -> str:
    """A format's limit as learners meet it in messages: a whole number below a million in full (65504, 57344,
    448), anything else to four significant digits (3.403e+38, 6.104e-05)."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


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
    return int(stored.view(fmt.int_dtype).item()) & ((1 << (fmt.bits + fmt.dropped_bits)) - 1)


def _round_off_low_bits(stored: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Round to nearest even at `mantissa_bits`, zeroing the dropped bits (a carry may reach the exponent: inf)."""
    if not math.isfinite(stored.item()):
        return stored
    raw = stored.view(fmt.int_dtype).long() & 0xFFFFFFFF
    half = 1 << (fmt.dropped_bits - 1)
    kept_lsb = (raw >> fmt.dropped_bits) & 1
    rounded = ((raw + half - 1 + kept_lsb) >> fmt.dropped_bits) << fmt.dropped_bits
    signed = torch.where(rounded >= 2**31, rounded - 2**32, rounded)
    return signed.to(fmt.int_dtype).view(fmt.dtype)


def _classify(exponent: str, mantissa: str, has_inf: bool = True) -> str:
    fraction_zero = "1" not in mantissa
    if "0" not in exponent:
        if not has_inf:
            return "nan" if "0" not in mantissa else "normal"
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
    if not math.isfinite(magnitude.double().item()):  # fp8 tensors have no isfinite
        return None
    raw = magnitude.view(fmt.int_dtype)
    # adding one unit of the last kept bit to the raw bits moves to the next larger magnitude
    following = float((raw + (1 << fmt.dropped_bits)).view(fmt.dtype).double().item())
    if not math.isfinite(following):
        return None  # the largest finite value: the next bit pattern is inf (or NaN in e4m3)
    return following - float(magnitude.double().item())
