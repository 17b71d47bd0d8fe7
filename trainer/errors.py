"""Errors a learner can cause; each message is one line that says what to do instead."""


class TrainerError(Exception):
    """Base for every user-facing failure of the trainer."""


class ConfigError(TrainerError):
    """A value out of range or an unknown name."""


class UnsupportedModeError(ConfigError):
    """A precision mode this device cannot run (tf32 on CPU, bf16 on an old GPU)."""


class DatasetError(TrainerError):
    """The dataset is missing, cannot be downloaded, or its files are damaged."""


class OutOfMemoryError(TrainerError):
    """A batch that does not fit in device memory."""


class CancelledError(TrainerError):
    """The run was cancelled by its owner."""
