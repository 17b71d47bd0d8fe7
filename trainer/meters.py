"""What the steps leave behind, read at log points: the loss, the loss scale and (when asked) what each update did.

Each meter keeps what it is told on the device between log points and reads it there, where the loop syncs anyway:
a read per step would add a host-device sync to every step. A new instrument is a new Meter in the run's list
(trainer/run.py); the loop (trainer/loop.py) tells every meter the same two things and knows none of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainer.progress import Position


class Meter:
    """One instrument: told after every step (no sync), and asked to read what it kept at each log point and at the
    end of each epoch (a sync is fine there); `fields` are what it adds to the run's RunResult."""

    def record(self, at: Position, loss: torch.Tensor) -> None:
        pass

    def read(self, at: Position, epoch_end: bool) -> None:
        pass

    def fields(self) -> dict:
        return {}


class Meters:
    """The run's meters, told in their order (the scales before the updates: a skipped step is no lost update);
    their reads happen every `log_every` steps of an epoch and at its end."""

    def __init__(self, loss: "LossMeter", others: Sequence[Meter], log_every: int):
        self.loss = loss
        self._meters = [loss, *others]
        self._log_every = log_every
        self._at: Position | None = None

    def record(self, at: Position, loss: torch.Tensor) -> float | None:
        """Tell every meter about the step; at a log point have them read: the mean loss logged then, else None."""
        self._at = at
        for meter in self._meters:
            meter.record(at, loss)
        if at.step % self._log_every:
            return None
        for meter in self._meters:
            meter.read(at, epoch_end=False)
        return self.loss.history[-1]["loss"]

    def end_epoch(self) -> None:
        for meter in self._meters:
            meter.read(self._at, epoch_end=True)

    def fields(self) -> dict:
        return {name: value for meter in self._meters for name, value in meter.fields().items()}


class LossMeter(Meter):
    """The loss, summed on the device each step; its mean read at log points into `history` ({"step", "epoch",
    "loss"}: the mean over the steps since the last one) and at each epoch's end into `epoch_means` (every step of
    the epoch counted, whatever the log interval)."""

    def __init__(self, device: torch.device):
        self._sum = torch.zeros((), dtype=torch.float32, device=device)
        self.count = 0
        self._epoch_sum = 0.0
        self.history: list[dict] = []
        self.epoch_means: list[float] = []

    def add(self, loss: torch.Tensor) -> None:
        self._sum += loss.float()
        self.count += 1

    def reset(self) -> None:
        self._sum.zero_()
        self.count = 0

    def mean_and_reset(self) -> float:
        """The mean since the last reset; `.item()` synchronises, so call it only at log points."""
        mean = self._sum.item() / self.count if self.count else float("nan")
        self.reset()
        return mean

    def record(self, at: Position, loss: torch.Tensor) -> None:
        self.add(loss)

    def read(self, at: Position, epoch_end: bool) -> None:
        if self.count:
            steps = self.count
            mean = self.mean_and_reset()
            self._epoch_sum += mean * steps
            if not epoch_end:
                self.history.append({"step": at.global_step, "epoch": at.epoch, "loss": mean})
        if epoch_end:  # like the lab, each epoch starts a fresh running loss
            self.epoch_means.append(self._epoch_sum / at.step)
            self._epoch_sum = 0.0

    def fields(self) -> dict:
        return {"loss_history": self.history, "epoch_losses": self.epoch_means}


class ScaleTracker(Meter):
    """The GradScaler's loss scale after every update, and the steps it skipped, with no device work per step.

    GradScaler.step() already waits for the overflow check on the host and calls the optimizer's step only when
    the gradients were finite, so a hook on the optimizer's step tells each step's fate for free; the scale then
    follows GradScaler's documented rule (halve after a skipped step, grow after growth_interval good ones in a
    row). At `flush()` (log points, where the loop syncs anyway) the rule's scale is checked against the scaler's
    own, and the scaler's wins where they differ.
    """

    def __init__(self, scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer):
        self._scaler = scaler
        self.enabled = scaler.is_enabled()
        self._scale = scaler.get_scale() if self.enabled else None  # no sync: nothing is scaled yet
        self._good_steps, self._stepped = 0, False
        self._pending: list[tuple[int, float]] = []
        self.history: list[dict] = []  # {"step", "scale"}
        self.skipped: list[int] = []
        if self.enabled:
            optimizer.register_step_post_hook(self._optimizer_stepped)

    def _optimizer_stepped(self, optimizer, args, kwargs) -> None:
        self._stepped = True

    def after_update(self, step: int) -> None:
        """After scaler.update(): the step's fate and the scale it left, on the host."""
        if not self.enabled:
            return
        if self._stepped:
            self._good_steps += 1
            if self._good_steps == self._scaler.get_growth_interval():
                self._scale, self._good_steps = self._scale * self._scaler.get_growth_factor(), 0
        else:
            self._scale, self._good_steps = self._scale * self._scaler.get_backoff_factor(), 0
            self.skipped.append(step)
        self._pending.append((step, self._scale))
        self._stepped = False

    def flush(self) -> None:
        """Move the scales since the last flush into `history`, the last one checked against the scaler's (a sync)."""
        if not self._pending:
            return
        actual = self._scaler.get_scale()
        if actual != self._scale:  # a rule this torch does not follow: its own scale from here on
            self._pending[-1], self._scale = (self._pending[-1][0], actual), actual
        self.history.extend({"step": step, "scale": scale} for step, scale in self._pending)
        self._pending.clear()

    def record(self, at: Position, loss: torch.Tensor) -> None:
        self.after_update(at.global_step)

    def read(self, at: Position, epoch_end: bool) -> None:
        self.flush()

    def fields(self) -> dict:
        return {"loss_scale_history": self.history, "skipped_step_numbers": self.skipped,
                "skipped_steps": len(self.skipped)}


class UpdateTracker(Meter):
    """What each optimizer step did, for runs that ask (config.track_updates: the safeguards lesson): how many
    gradient elements were exactly zero, and how many weights with a nonzero gradient the step left exactly as they
    were (the update rounded away). A zero gradient teaches nothing; neither does an update that rounds away.

    The counts stay on the device until `flush`, as the scales do. Each step copies the weights once (one model's
    worth of memory) to see which of them changed: a cost only the lesson's runs pay. train_step tells it about each
    step (before_step, after_step); as a meter it only reads, after `scales` has.
    """

    def __init__(self, parameters, enabled: bool, scales: ScaleTracker | None = None):
        self.enabled = enabled
        self._scales = scales
        self._params = [p for p in parameters if p.requires_grad]
        self._before: list[torch.Tensor] = []
        self._moving: list[torch.Tensor] = []
        self._step_counts: torch.Tensor | None = None
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, [gradients, zero, moving, stalled])
        self.history: list[dict] = []  # {"step", "zero_grad_share", "stalled_update_share"} per flush
        self.counts = {"steps": 0, "gradients": 0, "zero": 0, "moving": 0, "stalled": 0}

    def before_step(self) -> None:
        """After the backward pass, before the optimizer step: count the zero gradients, keep the weights."""
        if not self.enabled:
            return
        grads = [p.grad for p in self._params if p.grad is not None]
        self._moving = [g != 0 for g in grads]
        self._before = [p.detach().clone() for p in self._params if p.grad is not None]
        moving = sum(m.sum() for m in self._moving)
        gradients = sum(g.numel() for g in grads)
        self._step_counts = torch.stack([torch.as_tensor(gradients, device=moving.device), gradients - moving, moving])

    def after_step(self, step: int) -> None:
        """After the optimizer step: count the weights with a nonzero gradient that did not change."""
        if not self.enabled or self._step_counts is None:
            return
        params = [p for p in self._params if p.grad is not None]
        stalled = sum(((p.detach() == before) & moving).sum() for p, before, moving in zip(params, self._before,
                                                                                             self._moving))
        self._pending.append((step, torch.cat([self._step_counts, stalled.reshape(1)])))
        self._before, self._moving, self._step_counts = [], [], None

    def flush(self, skipped: set[int]) -> None:
        """Read the counts since the last flush (one sync) into `history` and `counts`. A step the GradScaler
        skipped (`skipped`, from ScaleTracker) changed no weight on purpose: its updates are not counted as lost."""
        if not self._pending:
            return
        rows = torch.stack([counts for _, counts in self._pending]).tolist()
        steps = [step for step, _ in self._pending]
        self._pending.clear()
        gradients = sum(row[0] for row in rows)
        zero = sum(row[1] for row in rows)
        stepped = [row for step, row in zip(steps, rows) if step not in skipped]
        moving, stalled = sum(row[2] for row in stepped), sum(row[3] for row in stepped)
        self.history.append({"step": steps[-1], "zero_grad_share": zero / gradients if gradients else None,
                             "stalled_update_share": stalled / moving if moving else None})
        for name, value in (("steps", len(rows)), ("gradients", gradients), ("zero", zero), ("moving", moving),
                            ("stalled", stalled)):
            self.counts[name] += int(value)

    def read(self, at: Position, epoch_end: bool) -> None:
        self.flush(set(self._scales.skipped) if self._scales is not None else set())

    def fields(self) -> dict:
        return {"update_history": self.history, "update_counts": dict(self.counts) if self.enabled else None}


class SyncEveryStep(Meter):
    """The lab's `running_loss += loss.item()`: the host waits for every step's loss (the lab's harness alone)."""

    def record(self, at: Position, loss: torch.Tensor) -> None:
        loss.item()
