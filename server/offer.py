"""What this server offers a learner, and the one door every job comes through.

From the instructor's settings, what the device can run and the data at hand: the values a learner may pick
(with the reason for each thing left out), where the Run page starts (the instructor's presets), one builder for
every kind of job a page submits, each already within the limits, and `admit`, which the job manager calls once
per submit. No Streamlit here: pages ask the offer and show its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace

from server.choices import Choice, parse_bool, parse_int, parse_optional_int, preset
from server.kinds import KindPolicy
from server.records import MAX_COMPARE_PAIRS, MAX_SWEEP_RUNS, JobSpec
from server.settings import Settings
from trainer.capabilities import DeviceFacts, ModeSupport, mode_support
from trainer.cifar10 import cifar10_available
from trainer.config import AMP_PRECISIONS, DATA_SOURCES, LOADERS, SAFEGUARD_FAILURES, WIDTHS, RunConfig
from trainer.errors import ConfigError
from trainer.results import LAB_REFERENCE

EPOCHS = tuple(range(1, 21))
BATCH_SIZES = tuple(2**n for n in range(5, 13))  # 32 .. 4096
SUBSETS = (256, 512, 1024, 2048, 5000, 10_000, 25_000, None)  # None = the whole training split
REPEATS = tuple(range(1, MAX_COMPARE_PAIRS + 1))  # pairs of runs a comparison makes; 1 keeps the class's queue short
# What the Run page offers beside fp32, where the device runs it and computes it differently from fp32.
COMPARED_PRECISIONS = ("amp-fp16", "amp-bf16", "tf32", "fp32-default")
TEST_IMAGES_FOR_SUBSETS = 1000  # a run on a subset checks accuracy on at most this many test images
LOSS_POINTS_PER_RUN = 100  # about this many loss points per run, for the charts
QUICK_DEMO = dict(epochs=1, batch_size=128, subset=5000, data="synthetic", loader="resident")
# The sweep: short timed runs of fp32 and an AMP mode over batch sizes (and widths).
SWEEP_BATCH_SIZES = BATCH_SIZES
SWEEP_STEPS = 20  # steps per run, by default
SWEEP_WIDTHS = WIDTHS
SWEEP_LOADERS = ("resident", "dataloader")  # resident first: no data waits
# Each point trains whole extra epochs until this many seconds are timed: a few steps on a fast GPU are milliseconds.
SWEEP_MIN_STEADY_S = 1.5
BREAKDOWN_STEPS = 30
BREAKDOWN_LABEL = "where the time goes"
# The memory page measures one step at these batch sizes (the lab's 256 among them), and its sweep at a few.
MEMORY_BATCH_SIZES = tuple(sorted({*BATCH_SIZES, 8, 16}))
MEMORY_SWEEP_BATCH_SIZES = (8, 32, 128, 512)
# The loss-scaling page's two fp16 runs: a few dozen steps on synthetic data, every loss scale recorded.
TINY_FP16_LABEL = "tiny amp-fp16 run for the loss-scale trace"
ABLATION_INIT_EXPONENT = 24  # the scaler starts far too high, at 2^24 ...
ABLATION_GROWTH_INTERVAL = 5  # ... and tries a higher scale after only 5 good steps
ABLATION_LABEL = (f"scaler ablation: amp-fp16 starting at 2^{ABLATION_INIT_EXPONENT}, growing after "
                  f"{ABLATION_GROWTH_INTERVAL} good steps")
# The safeguards lesson: amp-fp16 beside the same run without one safeguard, every step's gradients and updates
# counted. On a CPU fp16 is tens of times slower than fp32: 48 steps of 32 images, about 15 s a run on a 2-core AVX2
# EPYC; a GPU takes three epochs of 10,000 images in seconds.
SAFEGUARD_SIZES = {"cpu": dict(subset=1536, batch_size=32, epochs=1),
                   "cuda": dict(subset=10_000, batch_size=128, epochs=3)}
SAFEGUARD_LOG_POINTS = 24
SAFEGUARD_SHRINKS = (0, 8, 12, 16)  # loss x 2^-n: gradients 2^n times smaller (RunConfig.loss_shrink_log2)
SAFEGUARD_DEFAULT_SHRINK = 16
PROFILE_STEPS = 20  # a profiled comparison: this many steady steps per run under torch.profiler, after training
SAFEGUARD_LABELS = {"no-scaler": "without the GradScaler", "no-master-weights": "without fp32 master weights"}


def subset_name(subset: int | None) -> str:
    return "all 50,000" if subset is None else f"{subset:,}"


def pairs_name(pairs: int) -> str:
    return f"{pairs} pair{'s' if pairs != 1 else ''}"


@dataclass(frozen=True)
class ComparisonRequest:
    """What a learner picks on the Run page: the precision compared with fp32, and the settings both runs share.
    Its fields are the Run page's choices, by the names a link or a preset uses."""

    precision: str = "amp-bf16"
    epochs: int = 5
    batch_size: int = 256
    data: str = "cifar10"
    loader: str = "dataloader"
    width: int = 1
    channels_last: bool = False
    breakdown: bool = False
    profile: bool = False  # each run profiles PROFILE_STEPS more steps after its timed training (trainer/profile.py)
    subset: int | None = None  # None = the whole training split
    repeats: int = 1  # pairs of runs, the baseline and `precision` alternately
    baseline: str = "fp32"  # strict fp32; the lab's own comparison uses fp32-default (fp32 as PyTorch defaults it)

    @classmethod
    def of(cls, values: Mapping) -> "ComparisonRequest":
        """From the Run page's values ({param: value}); a name that is not a choice is an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown choice {unknown[0]!r} for a comparison: choose from {', '.join(sorted(known))}")
        return cls(**values)

    @classmethod
    def from_spec(cls, spec: JobSpec) -> "ComparisonRequest":
        """The request a comparison job was made from (its first pair, and how many pairs it has)."""
        baseline, candidate = spec.runs[0], spec.runs[1]
        return cls(precision=candidate.precision, baseline=baseline.precision, epochs=baseline.epochs, batch_size=baseline.batch_size,
                   data=baseline.data, loader=baseline.loader, width=baseline.width,
                   channels_last=baseline.channels_last, breakdown=baseline.breakdown,
                   profile=baseline.profile_steps > 0, subset=baseline.subset, repeats=len(spec.runs) // 2)

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """A short label for the job: what is compared (x3: in three pairs), on what."""
        return (
            f"{self.baseline} vs {self.precision}{f' x{self.repeats}' if self.repeats > 1 else ''}, "
            f"{self.epochs} epoch{'s' if self.epochs != 1 else ''}, batch {self.batch_size}, "
            f"{subset_name(self.subset)} {self.data} images, {self.loader} loader, width {self.width}"
            + (", channels_last" if self.channels_last else "") + (", profiled" if self.profile else "")
        )


_LAB = LAB_REFERENCE["settings"]  # the lab's scripts as they ran
LAB_COMPARISON = ComparisonRequest(precision=_LAB["candidate"], baseline=_LAB["baseline"], epochs=_LAB["epochs"],
                                   batch_size=_LAB["batch_size"], data=_LAB["data"], loader=_LAB["loader"],
                                   subset=_LAB["subset"], width=_LAB["width"])


class Offer:
    """This server's offer to a learner, and its door.

    `support` is what the device runs (None where it is not known yet: a GPU server whose hardware report has not
    come back; the run's own process then refuses a mode the GPU cannot run). `recommended` is the mode this
    hardware is best at; `presets` are the instructor's starting values ({param: text}, as in a link); `kinds`
    which kinds of job learners may queue, and how many each (the settings' mode by default).
    """

    def __init__(
        self,
        settings: Settings,
        support: ModeSupport | None,
        *,
        device_type: str | None = None,
        recommended: str | None = None,
        presets: Mapping[str, str] | None = None,
        kinds: KindPolicy | None = None,
    ):
        self.settings = settings
        self.support = support
        self.device_type = device_type or (support.device_type if support is not None else "cpu")
        self.presets = dict(presets or {})
        self.kinds = kinds or KindPolicy.for_mode(settings.class_mode)
        self._recommended = recommended

    @classmethod
    def for_device(cls, settings: Settings, device_type: str, kinds: KindPolicy | None = None) -> "Offer":
        """The offer where only the device type is known: a CPU's modes are known without asking; a GPU's are
        checked by each run's own process (asking here would open a CUDA context in the server)."""
        support = mode_support(DeviceFacts("cpu")) if device_type == "cpu" else None
        return cls(settings, support, device_type=device_type, kinds=kinds)

    # ---- what a learner may pick ----------------------------------------------------------------------

    @property
    def cifar10_ok(self) -> bool:
        """CIFAR-10 is in the instructor's data folder (a learner's job never downloads it)."""
        return cifar10_available(self.settings.data_root)

    @property
    def data_sources(self) -> tuple[str, ...]:
        return DATA_SOURCES if self.cifar10_ok else ("synthetic",)

    @property
    def default_data(self) -> str:
        return self.data_sources[0]

    @property
    def epochs(self) -> tuple[int, ...]:
        return tuple(e for e in EPOCHS if e <= self.settings.max_epochs)

    def batch_sizes(self, among: Sequence[int] = BATCH_SIZES) -> tuple[int, ...]:
        """The batch sizes of `among` within the instructor's limit; the limit itself where none is."""
        return tuple(b for b in among if b <= self.settings.max_batch_size) or (self.settings.max_batch_size,)

    @property
    def subsets(self) -> tuple[int | None, ...]:
        limit = self.settings.max_subset
        if limit is None:
            return SUBSETS
        return tuple(s for s in SUBSETS if s is not None and s <= limit) or (limit,)

    def compared_precisions(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """The precisions to compare with fp32 here, and the reason for each one left out."""
        support = self.support or mode_support(DeviceFacts(self.device_type))
        # A mode that computes exactly as fp32 here (fp32-default without TF32) would only compare fp32 with itself.
        left_out = {mode: support.refused.get(mode) or support.warnings[mode] for mode in COMPARED_PRECISIONS
                    if not support.runs(mode) or support.same_as.get(mode) == "fp32"}
        return tuple(mode for mode in COMPARED_PRECISIONS if mode not in left_out), left_out

    def default_precision(self, among: Sequence[str] | None = None) -> str:
        """The recommended AMP mode where it is among `among` (the compared precisions by default)."""
        among = tuple(among) if among is not None else self.compared_precisions()[0]
        if self._recommended in among:
            return self._recommended
        return "amp-bf16" if "amp-bf16" in among else among[0]

    @property
    def sweep_precisions(self) -> tuple[str, ...]:
        """What a sweep pits against fp32: the AMP modes offered here (tf32 is for comparisons)."""
        return tuple(mode for mode in self.compared_precisions()[0] if mode in AMP_PRECISIONS)

    def choices(self) -> dict[str, Choice]:
        """Every setting of the Run page by its parameter name, within the limits and this hardware, starting from
        the instructor's presets where they are offered (preset_problems says which are not)."""
        epochs, batches, subsets = self.epochs, self.batch_sizes(), self.subsets
        offered = self.compared_precisions()[0]
        listed = (
            Choice("run_epochs", "Epochs", epochs, min(5, epochs[-1]), "epochs", parse_int),
            Choice("run_batch_size", "Batch size", batches, min(256, batches[-1]), "batch_size", parse_int),
            Choice("run_precision", "AMP mode", offered, self.default_precision(offered), "precision",
                   old_param="amp"),
            Choice("run_data", "Data", self.data_sources, self.default_data, "data"),
            Choice("run_loader", "Loader", LOADERS, "dataloader", "loader"),
            Choice("run_width", "Model width", WIDTHS, 1, "width", parse_int),
            Choice("run_channels_last", "channels_last", (False, True), False, "channels_last", parse_bool),
            Choice("run_breakdown", "Data-wait breakdown", (False, True), False, "breakdown", parse_bool),
            Choice("run_profile", "Profile a short window", (False, True), False, "profile", parse_bool),
            Choice("run_subset", "Training images", subsets, subsets[-1], "subset", parse_optional_int, subset_name),
            Choice("run_repeats", "Repeats", REPEATS, 1, "repeats", parse_int, pairs_name),
        )
        return {c.param: preset(c, self.presets.get(c.param))[0] for c in listed}

    def preset_problems(self, presets: Mapping[str, str] | None = None) -> list[str]:
        """The presets this server cannot start from (not offered on this hardware, or over a limit), one line each."""
        bare = Offer(self.settings, self.support, device_type=self.device_type, recommended=self._recommended,
                     kinds=self.kinds)
        choices = bare.choices()
        presets = self.presets if presets is None else presets
        problems = (preset(choices[param], text)[1] for param, text in presets.items() if param in choices)
        return [problem for problem in problems if problem]

    def start(self) -> ComparisonRequest:
        """Where the Run page starts: the lab's settings, or the instructor's presets."""
        return ComparisonRequest.of({param: choice.default for param, choice in self.choices().items()})

    def blocking_reasons(self, request: ComparisonRequest) -> list[str]:
        """Why this comparison cannot run here (empty when it can): said before the learner queues it."""
        support = self.support or mode_support(DeviceFacts(self.device_type))
        refusal = support.size_refusal(request.precision, request.subset)
        return [refusal] if refusal else []

    # ---- the jobs a page submits ----------------------------------------------------------------------

    def comparison(self, request: ComparisonRequest) -> JobSpec:
        """fp32 and the chosen precision with equal settings, then again alternately (A B A B) for `repeats`."""
        subset = request.subset
        shared = dict(
            epochs=request.epochs, batch_size=request.batch_size, data=request.data, loader=request.loader,
            width=request.width, channels_last=request.channels_last, breakdown=request.breakdown, subset=subset,
            test_subset=None if subset is None else min(subset, TEST_IMAGES_FOR_SUBSETS),
            log_every=log_every(subset, request.batch_size, request.epochs),
            measure_peaks=True,  # for the step budget on Results: once per device, then from the server's cache
            profile_steps=PROFILE_STEPS if request.profile else 0,
        )
        runs = [RunConfig(precision=precision, **shared)
                for _ in range(request.repeats) for precision in (request.baseline, request.precision)]
        return JobSpec(kind="compare", runs=runs, label=request.describe())

    def lab_comparison(self) -> tuple[JobSpec, list[str]]:
        """The lab's own comparison, as its scripts run: fp32 as PyTorch defaults it (TF32 convolutions on an Ampere
        or newer GPU) against amp-fp16 with its GradScaler, the lab's DataLoader, batch 256, 5 epochs, the whole
        split of CIFAR-10; and one line for each way this server has to run it differently (the synthetic
        stand-in, the instructor's limits, fp16's subset on a CPU)."""
        request = LAB_COMPARISON
        notes = []
        if not self.cifar10_ok:
            request = replace(request, data="synthetic")
            notes.append("on the synthetic stand-in: CIFAR-10 is not in this server's data folder")
        limits = {"epochs": self.settings.max_epochs, "batch_size": self.settings.max_batch_size}
        for name, limit in limits.items():
            if getattr(request, name) > limit:
                request = replace(request, **{name: limit})
                notes.append(f"{name.replace('_', ' ')} {limit}, this server's limit (the lab's is "
                             f"{getattr(LAB_COMPARISON, name)})")
        support = self.support or mode_support(DeviceFacts(self.device_type))
        subset_limits = [limit for limit in (self.settings.max_subset, support.max_images.get(request.precision))
                         if limit is not None]
        if subset_limits:
            request = replace(request, subset=min(subset_limits))
            why = ("amp-fp16 is tens of times slower than fp32 on this CPU" if support.max_images.get(
                request.precision) == request.subset else "this server's limit")
            notes.append(f"on the first {request.subset:,} training images, not all 50,000: {why}")
        spec = self.comparison(request)
        spec.label = "the lab's comparison: " + spec.label
        return spec, notes

    def quick_demo(self) -> JobSpec:
        """A comparison small enough to finish in a minute or two: synthetic data held on the device, a subset, one
        epoch, the recommended mode. The instructor's presets govern it too: their precision, and never more
        epochs, images or a larger batch than they start the Run page with; and within the limits, so that a
        strict server does not refuse its own demo."""
        start = self.start()
        sizes = {"epochs": self.settings.max_epochs, "batch_size": self.settings.max_batch_size,
                 "subset": self.settings.max_subset or QUICK_DEMO["subset"]}
        for param in sizes:
            if param in self.presets:
                sizes[param] = min(sizes[param], getattr(start, param) or QUICK_DEMO[param])
        demo = {**QUICK_DEMO, **{param: min(QUICK_DEMO[param], limit) for param, limit in sizes.items()},
                "precision": start.precision if "precision" in self.presets else self.default_precision()}
        spec = self.comparison(ComparisonRequest.of(demo))
        spec.label, spec.purpose = "quick demo: " + spec.label, "quick-demo"
        return spec

    def sweep_defaults(self) -> dict:
        """Where the sweep's choices start: three batch sizes around the lab's 256 (the presets' batch among them),
        the presets' width and loader, else width 1 and the resident loader."""
        batches = self.batch_sizes(SWEEP_BATCH_SIZES)
        start = self.start()
        chosen = [b for b in (64, 256, 1024) if b in batches][:3] or list(batches[:1])
        if "batch_size" in self.presets and start.batch_size in batches and start.batch_size not in chosen:
            chosen = sorted([*chosen[:2], start.batch_size])
        return {"batch_sizes": chosen, "widths": [start.width if "width" in self.presets else 1],
                "loader": start.loader if "loader" in self.presets else SWEEP_LOADERS[0], "steps": SWEEP_STEPS}

    def sweep(
        self,
        precision: str,
        batch_sizes: Sequence[int],
        widths: Sequence[int] = (1,),
        steps_per_run: int = SWEEP_STEPS,
        loader: str = "resident",
    ) -> JobSpec:
        """fp32 and `precision` at every batch size and width, one epoch of `steps_per_run` steps each, alternating
        at each point so that a slow drift of the machine touches both alike; on a GPU the job then also searches
        the largest batch that fits. ConfigError (one line) for a sweep this server cannot take."""
        if precision not in AMP_PRECISIONS:
            raise ConfigError(f"the AMP mode of a sweep must be one of {', '.join(AMP_PRECISIONS)}, got {precision!r}")
        batch_sizes, widths = sorted(set(batch_sizes)), sorted(set(widths))
        if not batch_sizes or not widths:
            raise ConfigError("pick at least one batch size and one width for the sweep")
        count = 2 * len(batch_sizes) * len(widths)
        if count > MAX_SWEEP_RUNS:
            raise ConfigError(
                f"{len(batch_sizes)} batch sizes x {len(widths)} widths x 2 precisions is {count} runs; "
                f"a sweep takes at most {MAX_SWEEP_RUNS}: pick fewer batch sizes or widths"
            )
        if not 2 <= steps_per_run <= 1000:
            raise ConfigError(f"steps per run must be between 2 and 1000, got {steps_per_run}")
        base = RunConfig(data=self.default_data, loader=loader)
        warmup = min(base.warmup_steps, steps_per_run // 2)
        runs = [
            replace(base, precision=mode, batch_size=batch, width=width, epochs=1, subset=batch * steps_per_run,
                    test_subset=min(batch, 1000),  # accuracy is not the point here; keep evaluation short
                    warmup_steps=warmup, log_every=steps_per_run,
                    breakdown=False,  # per-step syncs would distort the throughput compared
                    min_steady_s=SWEEP_MIN_STEADY_S)
            for width in widths for batch in batch_sizes for mode in ("fp32", precision)
        ]
        for run in runs:  # said now, not at submit, when a point asks for more than this server allows
            self.check_limits(run)
        label = (f"sweep: fp32 vs {precision}, batch {', '.join(map(str, batch_sizes))}, "
                 f"width {', '.join(map(str, widths))}, {loader}")
        return JobSpec(kind="sweep", runs=runs, label=label, probe_max_batch=self.device_type == "cuda",
                       purpose="sweep")

    def breakdown(self, precision: str, batch_size: int, steps: int = BREAKDOWN_STEPS) -> JobSpec:
        """The same short run with each loader, timing data waits and compute apart."""
        if not 2 <= steps <= 1000:
            raise ConfigError(f"steps must be between 2 and 1000, got {steps}")
        base = RunConfig(precision=precision, batch_size=batch_size, data=self.default_data)
        runs = [replace(base, loader=loader, epochs=1, subset=batch_size * steps, test_subset=min(batch_size, 1000),
                        breakdown=True, log_every=steps, warmup_steps=min(base.warmup_steps, steps // 2))
                for loader in ("dataloader", "resident")]
        for run in runs:
            self.check_limits(run)
        label = f"{BREAKDOWN_LABEL}: DataLoader vs resident ({precision}, batch {batch_size})"
        return JobSpec(kind="breakdown", runs=runs, label=label)

    def tiny_fp16_run(self) -> JobSpec:
        """A few dozen amp-fp16 steps with the default scaler: small enough for a CPU."""
        return JobSpec(kind="run", runs=[self._tiny_fp16(1024, 32)], label=TINY_FP16_LABEL, purpose="tiny-fp16")

    def scaler_ablation(self) -> JobSpec:
        """32 steps of 8 images: the scaler starts far too high and probes upward every few steps."""
        run = self._tiny_fp16(256, 8, loss_scale_init=2.0**ABLATION_INIT_EXPONENT,
                              loss_scale_growth_interval=ABLATION_GROWTH_INTERVAL)
        return JobSpec(kind="run", runs=[run], label=ABLATION_LABEL, purpose="ablation")

    def _tiny_fp16(self, images: int, batch_size: int, **scaler) -> RunConfig:
        subset = min(images, self.settings.max_subset or images)
        return RunConfig(precision="amp-fp16", epochs=1, batch_size=min(batch_size, self.settings.max_batch_size),
                         data="synthetic", loader="resident", subset=subset, test_subset=64, num_workers=0,
                         log_every=1, warmup_steps=1, **scaler)

    def safeguard_demo(self, safeguard: str, shrink_log2: int = SAFEGUARD_DEFAULT_SHRINK) -> JobSpec:
        """amp-fp16 beside the same run without one of its safeguards (trainer.config.SAFEGUARD_FAILURES), both counting
        every step's zero gradients and rounded-away updates: a deliberate failure, labelled so. Without the scaler,
        the loss is shrunk by 2^-shrink_log2 in both runs (the learning rate grown to match), so that the gradients
        are as small as a deeper model's; the weights' failure needs no help and runs at the lab's loss."""
        if safeguard not in SAFEGUARD_FAILURES:
            raise ConfigError(f"unknown safeguard {safeguard!r}: choose one of {', '.join(SAFEGUARD_FAILURES)}")
        if shrink_log2 not in SAFEGUARD_SHRINKS:
            raise ConfigError(f"the loss shrink is one of 2^-{', 2^-'.join(map(str, SAFEGUARD_SHRINKS))}, "
                              f"got 2^-{shrink_log2}")
        shrink = shrink_log2 if safeguard == "no-scaler" else 0
        sizes = SAFEGUARD_SIZES.get(self.device_type, SAFEGUARD_SIZES["cpu"])
        subset = min(sizes["subset"], self.settings.max_subset or sizes["subset"])
        batch_size = min(sizes["batch_size"], self.settings.max_batch_size)
        epochs = min(sizes["epochs"], self.settings.max_epochs)
        steps = epochs * -(-subset // batch_size)
        guarded = RunConfig(precision="amp-fp16", epochs=epochs, batch_size=batch_size, data=self.default_data,
                            loader="resident", subset=subset, test_subset=min(subset, TEST_IMAGES_FOR_SUBSETS),
                            num_workers=0, warmup_steps=1, log_every=max(1, steps // SAFEGUARD_LOG_POINTS),
                            loss_shrink_log2=shrink, track_updates=True)
        failure = SAFEGUARD_FAILURES[safeguard]
        label = (f"deliberate failure, {SAFEGUARD_LABELS[safeguard]}: amp-fp16 vs {failure}"
                 + (f", loss x 2^-{shrink}" if shrink else ""))
        return JobSpec(kind="compare", runs=[guarded, replace(guarded, precision=failure)], label=label,
                       purpose="safeguards")

    def starting_jobs(self) -> dict[str, JobSpec]:
        """Each kind of job a page offers, as it starts (the presets, the sweep's and breakdown's defaults): what
        the console estimates per kind and the planner counts. A kind this server cannot build is left out."""
        defaults = self.sweep_defaults()
        builders = {
            "quick-demo": self.quick_demo,
            "comparison": lambda: self.comparison(self.start()),
            "sweep": lambda: self.sweep(self.default_precision(self.sweep_precisions), defaults["batch_sizes"],
                                        defaults["widths"], defaults["steps"], defaults["loader"]),
            "breakdown": lambda: self.breakdown("fp32", self.start().batch_size),
            "tiny-fp16": self.tiny_fp16_run,
            "ablation": self.scaler_ablation,
            "safeguards": lambda: self.safeguard_demo("no-scaler"),
        }
        jobs = {}
        for purpose, build in builders.items():
            try:
                jobs[purpose] = build()
            except ConfigError:  # over a limit here (a sweep's images on a strict server): nothing to estimate
                continue
        return jobs

    # ---- the door ---------------------------------------------------------------------------------------

    def admit(self, spec: JobSpec, used: Callable[[str], int] | None = None) -> JobSpec:
        """The job as this server runs it: its shape checked, its kind allowed (with `used`, how many jobs of a kind
        the learner has had since the policy began, its per-learner cap held), the instructor's data folder and this
        device forced in, every run validated once (its precision's name and this device's support in one check)
        and held to the limits. ConfigError or UnsupportedModeError, one line, for the first problem."""
        if not isinstance(spec, JobSpec):
            raise ConfigError("submit needs a JobSpec")
        spec.check_shape()
        refusal = self.kind_refusal(spec.purpose, used(spec.purpose) if used is not None else 0)
        if refusal:
            raise ConfigError(refusal)
        runs = [replace(run, data_root=self.settings.data_root, device=self.device_type,
                        peaks_cache=str(self.settings.peaks_cache_path)) for run in spec.runs]
        failures = [run.precision for run in runs if run.is_failure]
        if failures and spec.purpose != "safeguards":
            raise ConfigError(f"{failures[0]} is a deliberate failure: it runs only in the lesson on AMP without its "
                              "safeguards")
        refused = self.support.refused if self.support is not None else None
        for run in runs:
            run.validate(refused)
            self.check_limits(run)
        return JobSpec(spec.kind, runs, spec.label.strip(), bool(spec.probe_max_batch), spec.purpose)

    def kind_refusal(self, purpose: str, used: int) -> str | None:
        """Why a learner who has had `used` jobs of this kind may not queue another here (None: they may)."""
        return self.kinds.refusal(purpose, used)

    def check_limits(self, run: RunConfig) -> None:
        """ConfigError (one line) when `run` asks for more than the instructor allows or this device can take."""
        settings = self.settings
        if run.epochs > settings.max_epochs:
            raise ConfigError(f"{run.epochs} epochs is above this server's limit of {settings.max_epochs} set by the "
                              "instructor; choose fewer epochs")
        if run.batch_size > settings.max_batch_size:
            raise ConfigError(f"batch size {run.batch_size} is above this server's limit of {settings.max_batch_size} "
                              "set by the instructor; choose a smaller batch")
        if settings.max_subset is not None and (run.subset is None or run.subset > settings.max_subset):
            asked = "the whole training split" if run.subset is None else f"a subset of {run.subset} images"
            raise ConfigError(f"{asked} is above this server's limit of {settings.max_subset} training images set by "
                              "the instructor; choose a smaller subset")
        if self.support is not None and (refusal := self.support.size_refusal(run.precision, run.subset)):
            raise ConfigError(refusal)


def log_every(subset: int | None, batch_size: int, epochs: int) -> int:
    """Steps between logged losses: about LOSS_POINTS_PER_RUN points per run, and never rarer than the lab's 100."""
    images = subset or 50_000
    steps = epochs * -(-images // batch_size)
    return max(1, min(100, round(steps / LOSS_POINTS_PER_RUN)))
