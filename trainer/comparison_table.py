"""The lab's results table (Metric | FP32 | AMP | Improvement) for two runs: one builder, with its labels and
units, that the command line prints as text and the app shows as a table."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.results import LAB_REFERENCE, MEMORY_LABELS, RunResult, SpeedupInterval, compare

PRECISION_NAMES = {"fp32": "FP32", "fp32-default": "FP32 (PyTorch defaults)", "tf32": "TF32", "amp-fp16": "AMP (fp16)",
                   "amp-bf16": "AMP (bf16)",
                   # the deliberate failures (trainer.config.FAILURE_PRECISIONS) say so wherever they are named
                   "amp-fp16-unscaled": "AMP (fp16), no GradScaler: deliberate failure",
                   "fp16-true": "pure fp16, no fp32 master weights: deliberate failure"}
# Short names for table rows and chart axes; MEMORY_LABELS holds the full description of each figure.
MEMORY_SHORT_NAMES = {
    "torch_max_allocated": "PyTorch allocated",
    "torch_max_reserved": "PyTorch reserved",
    "nvml_process_used": "GPU, this process (nvidia-smi)",
    "nvml_device_used": "GPU in use, all processes (nvidia-smi)",
    "process_rss_growth": "Process memory growth (RSS)",
}
# The lab's table names each mode exactly (mode_name): the AMP modes here, the fp32 ones from what the run recorded.
EXACT_NAMES = {"amp-fp16": "AMP fp16 + GradScaler", "amp-bf16": "AMP bf16"}
COLUMNS_METRIC, COLUMNS_CHANGE = "Metric", "Improvement"
# The memory figure a comparison is summed up by (the sentence that interprets it, the class's table): the first of
# these both runs have, one fixed figure (quoting whichever shrank most overstated the saving). PyTorch's own peak
# first, as the lab's claim is about what training needs; on a CPU only the process's RSS growth is measured.
HEADLINE_MEMORY = ("torch_max_allocated", "nvml_process_used", "torch_max_reserved", "nvml_device_used",
                   "process_rss_growth")


def precision_name(precision: str) -> str:
    return PRECISION_NAMES.get(precision, precision)


def headline_memory(figures: dict) -> str | None:
    """The HEADLINE_MEMORY figure among `figures` (keyed by figure, e.g. Comparison.memory_reduction_pct)."""
    return next((key for key in HEADLINE_MEMORY if key in figures), None)


def format_bytes(count: float) -> str:
    """Decimal units, as the lab writes its 1.8 GB."""
    if count >= 1e9:
        return f"{count / 1e9:.2f} GB"
    if count >= 1e6:
        return f"{count / 1e6:.0f} MB"
    return f"{count / 1e3:.0f} kB"


def format_seconds(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def speed_change(baseline_s: float, candidate_s: float) -> str:
    """'1.56x faster (36% less time)' or '2.10x slower (110% more time)'."""
    if candidate_s <= 0 or baseline_s <= 0:
        return "n/a"
    ratio = baseline_s / candidate_s
    saved = 100.0 * (baseline_s - candidate_s) / baseline_s
    if round(ratio, 2) == 1.0:  # "1.00x faster (0% less time)" would claim a direction the figures do not show
        return "about the same time (1.00x)"
    if ratio >= 1:
        return f"{ratio:.2f}x faster ({saved:.0f}% less time)"
    return f"{1 / ratio:.2f}x slower ({-saved:.0f}% more time)"


def memory_change(baseline_bytes: float, candidate_bytes: float) -> str:
    """'39% less' or '12% more' memory than the baseline."""
    reduction = 100.0 * (baseline_bytes - candidate_bytes) / baseline_bytes if baseline_bytes else 0.0
    if round(reduction) == 0:
        return "about the same"
    return f"{reduction:.0f}% less" if reduction > 0 else f"{-reduction:.0f}% more"


@dataclass
class ComparisonTable:
    """Header, rows of four cells, and the notes a reader needs (what each memory figure is, warnings)."""

    columns: tuple[str, str, str, str]
    rows: list[tuple[str, str, str, str]]
    notes: list[str] = field(default_factory=list)

    def records(self) -> list[dict]:
        """One dict per row, keyed by the column names (a DataFrame's input)."""
        return [dict(zip(self.columns, row)) for row in self.rows]

    def as_text(self) -> str:
        """Aligned plain-text columns, then the notes, for a terminal."""
        lines = [self.columns, *self.rows]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.columns))]
        text = [" | ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines]
        text.insert(1, "-+-".join("-" * w for w in widths))
        return "\n".join(text + self.notes)


def comparison_table(
    baseline: RunResult, candidate: RunResult, interval: SpeedupInterval | None = None
) -> ComparisonTable:
    """The lab's table computed from two runs: time, throughput, each memory figure, accuracy, skipped steps;
    with `interval` (repeated pairs), the speedup's median and range, or a note that one pair has no range."""
    comparison = compare(baseline, candidate)
    epochs = baseline.config.epochs
    same_epochs = epochs == candidate.config.epochs
    rows = [(
        f"Training time ({epochs} epoch{'s' if epochs != 1 else ''})" if same_epochs else "Training time",
        format_seconds(baseline.total_time_s),
        format_seconds(candidate.total_time_s),
        speed_change(baseline.total_time_s, candidate.total_time_s),
    )]
    if interval is not None and interval.known:
        rows.append((f"Speedup over {interval.pairs} alternating pairs", "", "",
                     f"{interval.median:.2f}x, {interval.middle_words} (range {interval.low:.2f}x to "
                     f"{interval.high:.2f}x)"))
    if comparison.throughput_speedup is not None:
        rows.append((
            f"Throughput (images/s after {baseline.warmup_steps} warm-up steps)",
            f"{baseline.steady_images_per_s:,.0f}",
            f"{candidate.steady_images_per_s:,.0f}",
            f"{comparison.throughput_speedup:.2f}x",
        ))
    if baseline.timing_quality or candidate.timing_quality:
        rows.append(("Timing quality", _verdict(baseline), _verdict(candidate), ""))
    for key in comparison.memory_reduction_pct:
        before, after = baseline.peak_memory[key], candidate.peak_memory[key]
        rows.append((f"Peak memory: {MEMORY_SHORT_NAMES.get(key, key)}", format_bytes(before), format_bytes(after),
                     memory_change(before, after)))
    if comparison.accuracy_delta is not None:
        rows.append((
            "Test accuracy",
            f"{100 * baseline.test_accuracy:.1f}%",
            f"{100 * candidate.test_accuracy:.1f}%",
            _points(comparison.accuracy_delta),
        ))
    if "amp-fp16" in (baseline.precision, candidate.precision):
        rows.append(("Steps skipped by the loss scaler", str(baseline.skipped_steps), str(candidate.skipped_steps),
                     ""))
    notes = [f"{MEMORY_SHORT_NAMES.get(k, k)}: {MEMORY_LABELS.get(k, k)}" for k in comparison.memory_reduction_pct]
    if interval is not None and not interval.known:
        notes.append("speedup: one pair of runs, so its spread is unknown (compare --repeats 3 measures it)")
    notes += [f"timing ({r.precision}): noisy: {reason}" for r in (baseline, candidate)
              for reason in (r.timing_quality or {}).get("reasons", [])]
    notes += [f"warning ({r.precision}): {w}" for r in (baseline, candidate) for w in r.warnings]
    return ComparisonTable((COLUMNS_METRIC, *_column_names(baseline, candidate), COLUMNS_CHANGE), rows, notes)


def _points(delta: float) -> str:
    """An accuracy change in percentage points, '+0.0 points' for one that rounds to nothing (never '-0.0')."""
    points = round(100 * delta, 1)
    return f"{points + 0.0:+.1f} points"  # + 0.0 turns -0.0 into 0.0


def _verdict(result: RunResult) -> str:
    """'steady' or 'noisy' with the spread between intervals; '-' when the run did not record it."""
    quality = result.timing_quality
    if not quality:
        return "-"
    return quality["verdict"] + ("" if quality.get("cv") is None else f" (spread {quality['cv']:.0%})")


def lab_reference_table() -> ComparisonTable:
    """The lab's own example figures, in the same shape as comparison_table."""
    ref = LAB_REFERENCE
    fp32_mem, amp_mem = ref["fp32_peak_memory_bytes"], ref["amp_peak_memory_bytes"]
    rows = [
        ("Training time (5 epochs)", f"~{ref['fp32_time_s']:.0f} s", f"~{ref['amp_time_s']:.0f} s",
         "~" + speed_change(ref["fp32_time_s"], ref["amp_time_s"])),
        ("Peak GPU memory", f"~{fp32_mem / 1e9:.1f} GB", f"~{amp_mem / 1e9:.1f} GB", "~" + memory_change(fp32_mem, amp_mem)),
    ]
    return ComparisonTable((COLUMNS_METRIC, "FP32 (lab)", "AMP (lab)", COLUMNS_CHANGE), rows, [ref["source"]])


def mode_name(result: RunResult) -> str:
    """The exact mode a run trained in, as its table column says it: which fp32 (TF32 convolutions or not, read from
    what the run recorded), and whether fp16 ran with its GradScaler."""
    env, precision = result.environment, result.precision
    if precision == "fp32":
        return "FP32 (TF32 off)" if env.get("tf32_capable") else "FP32"
    if precision == "fp32-default":
        return "FP32 (PyTorch defaults: TF32 convs)" if env.get("tf32_in_effect") else "FP32 (PyTorch defaults)"
    return EXACT_NAMES.get(precision, precision_name(precision))


# How each loader differs from the lab's harness (trainer/config.py's LOADERS), as lab_differences says it.
LOADER_HARNESS = {
    "dataloader": "this app's DataLoader: workers kept between epochs, pinned memory, copies that overlap the step, "
                  "no loss.item() every step",
    "resident": "the whole split resident on the device, no DataLoader, no loss.item() every step",
    "lab": "the lab's harness",
}


def lab_differences(baseline: RunResult, candidate: RunResult) -> list[str]:
    """Every way a comparison ran differently from the lab's own scripts (LAB_REFERENCE's settings, their harness,
    their machine), one phrase each; never empty, since the machine at least differs."""
    lab, config, env = LAB_REFERENCE["settings"], baseline.config, baseline.environment
    ours = {"baseline": baseline.precision, "candidate": candidate.precision, "epochs": config.epochs,
            "batch_size": config.batch_size, "data": config.data, "loader": config.loader, "subset": config.subset,
            "width": config.width, "num_workers": env.get("loader_workers", config.num_workers)}
    shown = {"subset": lambda n: "all 50,000 images" if n is None else f"{n:,} images",
             "data": lambda name: {"cifar10": "CIFAR-10"}.get(name, name), "loader": LOADER_HARNESS.get,
             "num_workers": lambda n: f"{n} DataLoader worker{'s' if n != 1 else ''}"}
    named = {"num_workers": "", "loader": "the loader:"}
    differs = [f"{named.get(name, name.replace('_', ' '))} {shown.get(name, str)(ours[name])} (the lab's: "
               f"{shown.get(name, str)(lab[name])})".lstrip()
               for name in lab if ours[name] != lab[name] and not (name == "num_workers" and config.loader == "resident")]
    if env.get("device_type") == "cpu" and str(env.get("host_malloc", "")).startswith("tuned"):
        differs.append("glibc's malloc tuned to reuse freed memory (the lab's: its defaults)")
    differs.append(f"this server's {env.get('device_name') or 'device'} (the lab's: a Tensor Core GPU it does not "
                   "name)")
    differs.append("fixed seeds for the weights and the shuffle, and an accuracy check after the timed training "
                   "(the lab's: neither)")
    return differs


def _column_names(baseline: RunResult, candidate: RunResult) -> tuple[str, str]:
    """The exact modes of the two runs; told apart when they are the same mode."""
    base_name, cand_name = mode_name(baseline), mode_name(candidate)
    if base_name == cand_name:
        return f"{base_name} (first)", f"{cand_name} (second)"
    return base_name, cand_name
