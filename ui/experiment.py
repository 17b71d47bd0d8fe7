"""The experiment page's logic: which settings this server offers, why some are not offered, and the job they
make. No Streamlit here."""

from __future__ import annotations

from collections.abc import Mapping

from server.records import CPU_FP16_MAX_SUBSET, MAX_COMPARE_PAIRS, JobSpec
from server.settings import Settings
from trainer.capabilities import mode_support
from trainer.config import RunConfig
from trainer.environment import HardwareReport
from ui.choices import Choice, parse_bool, parse_int, parse_optional_int, preset

EPOCH_CHOICES = tuple(range(1, 21))
BATCH_SIZES = tuple(2**n for n in range(5, 13))  # 32 .. 4096
SUBSETS = (256, 512, 1024, 2048, 5000, 10_000, 25_000, None)  # None = the whole training split
WIDTHS = (1, 2, 4, 8)
LOADERS = ("dataloader", "resident")
DATA_SOURCES = ("cifar10", "synthetic")
# What the Run page offers beside fp32, where the device runs it and computes it differently from fp32.
COMPARED_MODES = ("amp-fp16", "amp-bf16", "tf32", "fp32-default")
REPEATS = tuple(range(1, MAX_COMPARE_PAIRS + 1))  # pairs of runs a comparison makes; 1 keeps the class's queue short
TEST_IMAGES_FOR_SUBSETS = 1000  # a quick run checks accuracy on at most this many test images
LOSS_POINTS_PER_RUN = 100  # about this many loss points per run, for the charts
QUICK_DEMO = dict(epochs=1, batch_size=128, subset=5000, data="synthetic", loader="resident")

LOADER_NAMES = {
    "dataloader": "the lab's DataLoader (PIL, ToTensor, 4 workers)",
    "resident": "resident (whole split on the device, sliced)",
}
DATA_NAMES = {"cifar10": "CIFAR-10", "synthetic": "synthetic (CIFAR-shaped, generated)"}


def subset_name(subset: int | None) -> str:
    return "all 50,000" if subset is None else f"{subset:,}"


def pairs_name(pairs: int) -> str:
    return f"{pairs} pair{'s' if pairs != 1 else ''}"


def amp_modes(report: HardwareReport) -> tuple[tuple[str, ...], dict[str, str]]:
    """The modes to compare with fp32 on this hardware, and the reason for each one left out."""
    support = mode_support(report.facts)
    # A mode that computes exactly as fp32 here (fp32-default without TF32) would only compare fp32 with itself.
    missing = {mode: support.refused.get(mode) or support.warnings[mode] for mode in COMPARED_MODES
               if not support.runs(mode) or support.same_as.get(mode) == "fp32"}
    return tuple(mode for mode in COMPARED_MODES if mode not in missing), missing


def tf32_note(report: HardwareReport) -> str:
    """What this app's "fp32" is beside the lab script's on this device (trainer.capabilities decides whether TF32
    exists here): on a GPU with TF32, strict fp32 against the lab's TF32 convolutions; elsewhere, one line saying
    that the two are the same."""
    if mode_support(report.facts).same_as.get("fp32-default") == "fp32":
        device = "a CPU" if report.device_type == "cpu" else f"this GPU (compute capability {report.compute_capability})"
        return (f"On {device} there is no TF32, so this app's fp32 and fp32 as PyTorch defaults (the lab's baseline) "
                "are the same arithmetic here.")
    return (
        "**fp32 in this app is strict fp32**: TF32 off for convolutions and matmuls. The lab's script as written sets "
        "no TF32 switches, so on this GPU (Ampere or newer) its fp32 convolutions run in TF32, as PyTorch lets cuDNN "
        "do by default. **fp32-default** (fp32 as PyTorch defaults) is the lab's baseline: pick it as the mode to "
        "compare to see what those TF32 convolutions gain over strict fp32; AMP's speedup over strict fp32 is larger "
        "than over the lab's baseline by about that much."
    )


def default_amp(report: HardwareReport, offered: tuple[str, ...]) -> str:
    if report.recommended_amp in offered:
        return report.recommended_amp
    return "amp-bf16" if "amp-bf16" in offered else offered[0]


def experiment_choices(
    settings: Settings, report: HardwareReport, cifar10_ok: bool, presets: Mapping[str, str] | None = None
) -> dict[str, Choice]:
    """Every setting of the experiment page, limited by the instructor's settings and this hardware, starting
    from the instructor's presets where this hardware offers them (see preset_problems for the others)."""
    epochs = tuple(e for e in EPOCH_CHOICES if e <= settings.max_epochs)
    batches = tuple(b for b in BATCH_SIZES if b <= settings.max_batch_size) or (settings.max_batch_size,)
    subsets = SUBSETS
    if settings.max_subset is not None:
        subsets = tuple(s for s in SUBSETS if s is not None and s <= settings.max_subset) or (settings.max_subset,)
    offered, _ = amp_modes(report)
    sources = DATA_SOURCES if cifar10_ok else ("synthetic",)
    choices = (
        Choice("run_epochs", "Epochs", epochs, min(5, epochs[-1]), "epochs", parse_int),
        Choice("run_batch_size", "Batch size", batches, min(256, batches[-1]), "batch_size", parse_int),
        Choice("run_amp", "AMP mode", offered, default_amp(report, offered), "amp"),
        Choice("run_data", "Data", sources, sources[0], "data"),
        Choice("run_loader", "Loader", LOADERS, "dataloader", "loader"),
        Choice("run_width", "Model width", WIDTHS, 1, "width", parse_int),
        Choice("run_channels_last", "channels_last", (False, True), False, "channels_last", parse_bool),
        Choice("run_breakdown", "Data-wait breakdown", (False, True), False, "breakdown", parse_bool),
        Choice(
            "run_subset", "Training images", subsets, subsets[-1], "subset", parse_optional_int, subset_name
        ),
        Choice("run_repeats", "Repeats", REPEATS, 1, "repeats", parse_int, pairs_name),
    )
    return {c.param: preset(c, (presets or {}).get(c.param))[0] for c in choices}


def starting_values(choices: Mapping[str, Choice]) -> dict:
    """The values the Run page starts from ({param: value}): the lab's, or the instructor's presets."""
    return {param: choice.default for param, choice in choices.items()}


def preset_problems(choices: Mapping[str, Choice], presets: Mapping[str, str]) -> list[str]:
    """The presets this server cannot start from (not offered on this hardware or over a limit), one line each."""
    problems = (preset(choices[param], text)[1] for param, text in presets.items() if param in choices)
    return [problem for problem in problems if problem]


def blocking_reasons(values: dict, report: HardwareReport) -> list[str]:
    """Why these settings cannot run on this hardware (empty when they can)."""
    reasons = []
    if values["amp"] == "amp-fp16" and report.device_type == "cpu":
        subset = values["subset"]
        if subset is None or subset > CPU_FP16_MAX_SUBSET:
            reasons.append(
                f"amp-fp16 on a CPU without AMX-FP16 units (most CPUs) is tens of times slower than fp32, so this "
                f"server runs it only on at most {CPU_FP16_MAX_SUBSET:,} training images: pick a smaller subset, "
                "or amp-bf16."
            )
    return reasons


def log_every(subset: int | None, batch_size: int, epochs: int) -> int:
    """Steps between logged losses: about LOSS_POINTS_PER_RUN points per run, and never rarer than the lab's 100."""
    images = subset or 50_000
    steps = epochs * -(-images // batch_size)
    return max(1, min(100, round(steps / LOSS_POINTS_PER_RUN)))


def run_configs(values: dict, amp: str) -> list[RunConfig]:
    """The fp32 baseline and the `amp` run, identical in everything but precision (`repeats` is not a run's
    setting: comparison_spec repeats the pair)."""
    subset = values["subset"]
    common = {
        **values,  # the page's settings are named as RunConfig's fields
        "test_subset": None if subset is None else min(subset, TEST_IMAGES_FOR_SUBSETS),
        "log_every": log_every(subset, values["batch_size"], values["epochs"]),
    }
    return [RunConfig.from_dict({**common, "precision": precision}) for precision in ("fp32", amp)]


def describe(values: dict) -> str:
    """A short label for the job: what is compared (x3: in three pairs), on what."""
    pairs = values.get("repeats", 1)
    return (
        f"fp32 vs {values['amp']}{f' x{pairs}' if pairs > 1 else ''}, "
        f"{values['epochs']} epoch{'s' if values['epochs'] != 1 else ''}, "
        f"batch {values['batch_size']}, {subset_name(values['subset'])} {values['data']} images, "
        f"{values['loader']} loader, width {values['width']}"
        + (", channels_last" if values["channels_last"] else "")
    )


def comparison_spec(values: dict) -> JobSpec:
    """The job the Run button submits: the fp32 baseline and the chosen mode, one after the other, then again
    alternately (A B A B) for `repeats` pairs; one pair where the values do not say (the quick demo)."""
    runs = [run for _ in range(values.get("repeats", 1)) for run in run_configs(values, values["amp"])]
    return JobSpec(kind="compare", runs=runs, label=describe(values))


def quick_demo_spec(report: HardwareReport, settings: Settings) -> JobSpec:
    """A comparison small enough to finish in a minute or so: synthetic data, a subset, one epoch; within the
    instructor's limits, so that a strict server does not refuse its own demo."""
    offered, _ = amp_modes(report)
    values = dict(QUICK_DEMO, width=1, channels_last=False, breakdown=False, amp=default_amp(report, offered))
    values["batch_size"] = min(values["batch_size"], settings.max_batch_size)
    values["epochs"] = min(values["epochs"], settings.max_epochs)
    if settings.max_subset is not None:
        values["subset"] = min(values["subset"], settings.max_subset)
    spec = comparison_spec(values)
    spec.label = "quick demo: " + spec.label
    return spec
