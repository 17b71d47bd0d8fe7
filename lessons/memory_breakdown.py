"""Where a training step's memory goes: the lab model, one precision, one batch size, measured.

Every component is the size of real tensors found during a real step (parameters, their gradients, the optimizer's
buffers, and, through saved-tensor hooks, what autograd keeps for the backward pass), and the totals come from
the allocator itself: on the CPU every allocation and free the allocator reports to PyTorch's profiler, on a GPU
the caching allocator's statistics and nvidia-smi's figure for the process. The components at the end of the
forward pass add up to the allocator's live bytes there (tests/lessons/test_memory_breakdown.py checks it).

Run it in a fresh process (`python -m lessons.memory_breakdown`, which the page does): the CPU profiler counts
every thread's allocations, and on a GPU only a fresh process shows the CUDA context as nvidia-smi sees it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from trainer.child_process import run_python_json
from trainer.config import from_known_fields
from trainer.errors import ConfigError
from trainer.memory import MemoryMonitor
from trainer.model import build_model
from trainer.precision import PrecisionPolicy

MAX_BATCH = 4096
POOL_INDICES = "saved activations: int64 (max-pool indices)"
OTHER = "other live memory (logits, loss, library workspaces)"
BACKWARD_EXTRA = "backward's extra at its peak"
WEIGHT_COPIES = "16-bit weight copies (autocast)"
RESERVE = "allocator's cache (reserved, unused)"
CONTEXT = "CUDA context and libraries"
# What the step holds whatever the batch, and what AMP leaves in fp32.
FIXED = ("weights (fp32)", "gradients (fp32)", "optimizer state (momentum, fp32)")
# Bottom to top in the stacked chart: what the step starts with, what the forward pass keeps, what backward adds.
ORDER = (
    "weights (fp32)",
    "optimizer state (momentum, fp32)",
    "input batch",
    WEIGHT_COPIES,
    "saved activations: float32",
    "saved activations: bfloat16",
    "saved activations: float16",
    POOL_INDICES,
    OTHER,
    "gradients (fp32)",
    BACKWARD_EXTRA,
    RESERVE,
    CONTEXT,
)
_MARKS = ("mark:start", "mark:forward-end")


@dataclass
class MemoryBreakdown:
    """One step of the lab model: its components in bytes, and what the allocator measured."""

    precision: str
    device: str  # cpu | cuda
    batch_size: int
    width: int
    components: dict[str, int]  # ORDER's names -> bytes, only those present
    forward_live: int  # allocator: bytes live at the end of the forward pass (everything the step holds then)
    peak: int  # allocator: most bytes live at once during the step
    process_total: int | None = None  # GPU: this process's memory as nvidia-smi lists it
    notes: list[str] = field(default_factory=list)

    @property
    def forward_components(self) -> int:
        """The components found through tensors that exist at the end of the forward pass: everything but the
        gradients, what comes after them, and the unexplained rest (OTHER), so it can be checked against
        forward_live, which the allocator measured on its own."""
        late = {OTHER, "gradients (fp32)", BACKWARD_EXTRA, RESERVE, CONTEXT}
        return sum(size for name, size in self.components.items() if name not in late)

    @property
    def total(self) -> int:
        """The stacked bar's height: the allocator's peak, plus on a GPU what nvidia-smi sees beyond it."""
        return sum(self.components.values())

    @property
    def saved_activations(self) -> int:
        return sum(size for name, size in self.components.items() if name.startswith("saved activations"))

    def rows(self) -> list[dict]:
        """One row per component, in ORDER, for a chart or a table."""
        return [{"precision": self.precision, "batch_size": self.batch_size, "component": name, "order": i,
                 "bytes": self.components[name]} for i, name in enumerate(ORDER) if name in self.components]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MemoryBreakdown:
        return from_known_fields(cls, data)


def saving(before: float, after: float) -> float:
    """The share `after` saves on `before` (negative when it is larger; 0 without a `before`)."""
    return 1 - after / before if before else 0.0


@dataclass(frozen=True)
class MemoryComparison:
    """One step measured in fp32 and in an AMP mode at the same batch: the figures the memory page states."""

    fp32: MemoryBreakdown
    mixed: MemoryBreakdown

    @property
    def fixed(self) -> int:
        """Weights, gradients and momentum: fp32 in both modes."""
        return sum(self.fp32.components.get(name, 0) for name in FIXED)

    @property
    def pool_indices(self) -> int:
        return self.mixed.components.get(POOL_INDICES, 0)

    @property
    def weight_copies(self) -> int:
        return self.mixed.components.get(WEIGHT_COPIES, 0)

    @property
    def activation_saving(self) -> float:
        return saving(self.fp32.saved_activations, self.mixed.saved_activations)

    @property
    def peak_saving(self) -> float:
        """The share AMP saves of the step's tensors at their peak (the allocator's own figure, in every device)."""
        return saving(self.fp32.peak, self.mixed.peak)

    @property
    def total_saving(self) -> float:
        """The share AMP saves of the stacked bar: on a GPU that includes the allocator's reserve and the CUDA
        context, what nvidia-smi sees for the process."""
        return saving(self.fp32.total, self.mixed.total)

    def component_rows(self) -> list[dict]:
        """Each component found in either mode, in bytes: {"component", "fp32", <the AMP mode>}."""
        names = dict.fromkeys([*self.fp32.components, *self.mixed.components])
        return [{"component": name, "fp32": self.fp32.components.get(name, 0),
                 self.mixed.precision: self.mixed.components.get(name, 0)} for name in names]


def peaks_by_batch(found: Iterable[MemoryBreakdown]) -> list[dict]:
    """A step's peak per mode and batch size, with the share each saves on fp32's at the same batch:
    {"precision", "batch_size", "bytes", "saving"} (fp32's saving is 0)."""
    found = list(found)
    fp32 = {r.batch_size: r.total for r in found if r.precision == "fp32"}
    return [{"precision": r.precision, "batch_size": r.batch_size, "bytes": r.total,
             "saving": saving(fp32.get(r.batch_size, 0), r.total)} for r in found]


def measure(precision: str = "fp32", batch_size: int = 256, width: int = 1, device: str = "cpu",
            seed: int = 0) -> MemoryBreakdown:
    """Build the lab model, take a warm-up step (the optimizer's buffers appear), then measure the next one."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ConfigError(f"batch size must be between 1 and {MAX_BATCH}, got {batch_size}")
    policy = PrecisionPolicy.resolve(precision, device)
    dev = torch.device(device)
    if dev.type == "cuda":
        return _measure_cuda(policy, dev, batch_size, width, seed)
    return _measure_cpu(policy, dev, batch_size, width, seed)


def _measure_cpu(policy, dev, batch_size, width, seed) -> MemoryBreakdown:
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        lab = _Lab(policy, dev, batch_size, width, seed)
        lab.warm_up()
        with record_function(_MARKS[0]):
            pass
        lab.forward_with_hooks()
        with record_function(_MARKS[1]):
            pass
        lab.backward_and_step()
    live, peak = _live_bytes_at_marks(prof.profiler.kineto_results.events())
    return lab.breakdown(forward_live=live[_MARKS[1]], peak=peak)


def _live_bytes_at_marks(events) -> tuple[dict[str, int], int]:
    """Replay the allocator's allocations and frees in time order: live bytes at each mark, and the peak after the
    first mark (the measured step)."""
    marks = {e.name(): e.start_ns() for e in events if e.name() in _MARKS}
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    live, at, peak = 0, {}, 0
    pending = sorted(marks.items(), key=lambda item: item[1])
    for when, nbytes in memory:
        while pending and pending[0][1] <= when:
            at[pending.pop(0)[0]] = live
        live += nbytes
        if _MARKS[0] in at:
            peak = max(peak, live)
    for name, _ in pending:
        at[name] = live
    return at, peak


def _measure_cuda(policy, dev, batch_size, width, seed) -> MemoryBreakdown:
    monitor = MemoryMonitor(dev).start()  # empties the cache and resets the peaks; samples nvidia-smi's figure
    lab = _Lab(policy, dev, batch_size, width, seed)
    lab.warm_up()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    lab.forward_with_hooks()
    torch.cuda.synchronize(dev)
    forward_end = torch.cuda.memory_allocated(dev)
    lab.backward_and_step()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    peaks = monitor.stop()
    reserved = torch.cuda.max_memory_reserved(dev)
    result = lab.breakdown(forward_live=forward_end, peak=peak)
    result.components[RESERVE] = max(0, reserved - peak)
    nvml = peaks.get("nvml_process_used")
    if nvml is not None:
        result.process_total = nvml
        result.components[CONTEXT] = max(0, nvml - reserved)
    else:
        result.notes.append("nvidia-smi's figure for this process was not available, so the CUDA context is not "
                            "shown" + (f" ({'; '.join(monitor.warnings)})" if monitor.warnings else "") + ".")
    return result


class _Lab:
    """The lab's model, SGD with momentum and cross-entropy, under one precision policy, on a random batch
    (memory does not depend on the pixel values)."""

    def __init__(self, policy: PrecisionPolicy, dev: torch.device, batch_size: int, width: int, seed: int):
        self.policy, self.batch_size, self.width = policy, batch_size, width
        self.model = build_model(width, dev, seed=seed)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.criterion = nn.CrossEntropyLoss()
        self.scaler = policy.make_scaler()
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(batch_size, 3, 32, 32, generator=generator).to(dev)
        self.labels = torch.randint(0, 10, (batch_size,), generator=generator).to(dev)
        self.saved: dict[int, tuple[str, int]] = {}  # storage address -> (component, bytes)
        self.loss = None

    def warm_up(self) -> None:
        """One plain fp32 step: it creates the optimizer's buffers (fp32 in every mode) and the libraries' handles.
        Not in the measured precision, since a bf16 step on a CPU without bf16 instructions takes seconds."""
        self.forward(autocast=False)
        self.loss.backward()
        self.optimizer.step()
        self.loss = None

    def forward(self, autocast: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # the lab's zero_grad(): gradients are freed between steps
        with self.policy.autocast() if autocast else contextlib.nullcontext():
            self.loss = self.criterion(self.model(self.images), self.labels)

    def forward_with_hooks(self) -> None:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            self.forward()

    def backward_and_step(self) -> None:
        self.scaler.scale(self.loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.loss = None

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address not in self.saved:
            self.saved[address] = (self._component(tensor), storage.nbytes())
        return tensor

    def _component(self, tensor: torch.Tensor) -> str:
        address = tensor.untyped_storage().data_ptr()
        if address in _addresses(self.model.parameters()):
            return "weights (fp32)"  # conv and linear keep their fp32 weight itself (counted once, as weights)
        if address in _addresses((self.images, self.labels)):
            return "input batch"
        if _is_weight_copy(tensor):
            return WEIGHT_COPIES
        if tensor.dtype == torch.int64:
            return POOL_INDICES
        return f"saved activations: {str(tensor.dtype).removeprefix('torch.')}"

    def breakdown(self, forward_live: int, peak: int) -> MemoryBreakdown:
        """The components beside the allocator's own figures, which count from before the model existed."""
        parameters = list(self.model.parameters())
        components = {
            "weights (fp32)": _storage_bytes(parameters),
            "optimizer state (momentum, fp32)": _storage_bytes(
                t for state in self.optimizer.state.values() for t in state.values() if torch.is_tensor(t)),
            "input batch": _storage_bytes((self.images, self.labels)),
        }
        counted = set(components)  # a parameter or the batch saved for backward is already in its own component
        for name, nbytes in self.saved.values():
            if name not in counted:
                components[name] = components.get(name, 0) + nbytes
        other = forward_live - sum(components.values())
        if other > 0:
            components[OTHER] = other  # what the allocator holds beyond the tensors found: small on a CPU
        components["gradients (fp32)"] = _storage_bytes(p.grad for p in parameters if p.grad is not None)
        components[BACKWARD_EXTRA] = max(0, peak - forward_live - components["gradients (fp32)"])
        return MemoryBreakdown(self.policy.precision, self.policy.device_type, self.batch_size, self.width,
                               components, forward_live, peak)


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def _addresses(tensors: Iterable[torch.Tensor]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def _storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage count once)."""
    sizes = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
    return sum(sizes.values())


def _is_weight_copy(tensor: torch.Tensor) -> bool:
    """A 16-bit copy that autocast made of a parameter: its autograd node is a cast whose input is a leaf
    (a transposed view, as linear saves it, is followed back to the copy it views)."""
    base = tensor._base if tensor._base is not None else tensor
    node = base.grad_fn
    if node is None or node.name() != "ToCopyBackward0":
        return False
    return any(type(fn).__name__ == "AccumulateGrad" for fn, _ in node.next_functions if fn is not None)


def measure_many(precisions: Iterable[str], batch_sizes: Iterable[int], width: int = 1,
                 device: str = "cpu") -> list[MemoryBreakdown]:
    """Every precision at every batch size, each step measured on its own (in this process)."""
    return [measure(p, b, width, device) for b in batch_sizes for p in precisions]


def measure_in_fresh_process(precisions: Iterable[str], batch_sizes: Iterable[int], width: int = 1,
                             device: str = "cpu", timeout_s: float = 300,
                             env: dict[str, str] | None = None) -> list[MemoryBreakdown]:
    """measure_many in a fresh Python, so that nothing else in the asking process is counted (`env` pins the
    child's GPU)."""
    args = ["-m", "lessons.memory_breakdown", "--precisions", ",".join(precisions),
            "--batch-sizes", ",".join(str(b) for b in batch_sizes), "--width", str(width), "--device", device]
    return [MemoryBreakdown.from_dict(d) for d in run_python_json(args, timeout_s=timeout_s, env=env)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Where one training step of the lab model puts its memory; "
                                                 "prints a JSON list, one breakdown per precision and batch size.")
    parser.add_argument("--precisions", default="fp32,amp-bf16", help="comma-separated modes, e.g. fp32,amp-fp16")
    parser.add_argument("--batch-sizes", default="256", help="comma-separated batch sizes, e.g. 64,256")
    parser.add_argument("--width", type=int, default=1, help="model width multiplier (1 = the lab's model)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    found = measure_many(args.precisions.split(","), batch_sizes, args.width, args.device)
    print(json.dumps([b.to_dict() for b in found]))


if __name__ == "__main__":
    main()
