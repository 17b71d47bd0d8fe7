"""Step 1 of the GPU kit, in a fresh process: the GPU, its driver, torch and CUDA, and the TF32 defaults as this
torch reports them before anything sets them. `python -m bench.gpu_env --device cuda|cpu` prints one JSON line.

The TF32 defaults are read first, in a process that has set nothing, because the trainer changes them for every run
and because torch 2.9-2.10 warn on reading the old `allow_tf32` flags: any warning raised here is recorded.

The process imports what `python -m trainer run` imports and makes a CUDA context, so the kit can time it as a fresh
run's start on this machine (what the kit's time plan is sized from).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import warnings

import torch

# The newer per-backend switches (torch 2.9 and later); older versions have only the allow_tf32 flags.
FP32_PRECISION_SWITCHES = (
    ("fp32_precision", ("backends",)),
    ("cuda_matmul_fp32_precision", ("backends", "cuda", "matmul")),
    ("cudnn_fp32_precision", ("backends", "cudnn")),
    ("cudnn_conv_fp32_precision", ("backends", "cudnn", "conv")),
)


def tf32_defaults() -> dict:
    """The TF32 switches of a process that has set none: the new fp32_precision ones where this torch has them,
    then the old allow_tf32 flags, with any warning the reading raised."""
    found: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, path in FP32_PRECISION_SWITCHES:
            holder = torch
            for part in path:
                holder = getattr(holder, part, None)
            value = getattr(holder, "fp32_precision", None) if holder is not None else None
            if isinstance(value, str):
                found[name] = value
        for name, read in (
            ("cuda_matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
            ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
            ("float32_matmul_precision", torch.get_float32_matmul_precision),
        ):
            try:
                found[name] = read()
            except Exception as err:  # newer torch raises once the new API is in use; record rather than stop
                found[name] = f"unreadable: {type(err).__name__}: {err}"
    found["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return found


def nvml_facts(torch_uuid: str | None) -> dict:
    """Driver version and each GPU as NVML sees it (name, UUID, memory); {"error": ...} without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as err:  # no pynvml, or no driver library: both are facts worth recording
        return {"error": f"NVML unavailable: {type(err).__name__}: {err}"}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "memory_total_bytes": int(memory.total),
                "memory_used_bytes": int(memory.used),
                "mig_devices": mig_devices(pynvml, handle),
            })
        uuids = [uuid for gpu in gpus for uuid in [gpu["uuid"], *(mig["uuid"] for mig in gpu["mig_devices"])]]
        matched = [uuid for uuid in uuids if torch_uuid and uuid.endswith(torch_uuid)]
        return {
            "driver_version": _text(driver),
            "nvml_version": _text(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(),
            "gpus": gpus,
            "torch_gpu_found_by_uuid": bool(matched),
        }
    except Exception as err:
        return {"error": f"NVML query failed: {type(err).__name__}: {err}"}
    finally:
        pynvml.nvmlShutdown()


def mig_devices(pynvml, handle) -> list[dict]:
    """The MIG slices of one GPU as NVML lists them (UUID "MIG-...", memory); empty where MIG is off or the driver
    cannot say. torch sees a slice as a GPU of its own."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    except Exception:  # a GPU without MIG, or an older pynvml or driver
        return []
    found = []
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            found.append({"uuid": _text(pynvml.nvmlDeviceGetUUID(mig)),
                          "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(mig).total)})
        except Exception:  # an empty slot
            continue
    return found


def host_facts() -> dict:
    """What the lab's DataLoader workers depend on: the CPU cores this process may use, and /dev/shm, through which
    the workers hand their batches over (a small one fails them with a bus error or "No space left on device")."""
    facts: dict = {"cpu_count": os.cpu_count(), "cpu_usable": len(os.sched_getaffinity(0))}
    try:
        shm = shutil.disk_usage("/dev/shm")
        facts["dev_shm"] = {"total_bytes": shm.total, "free_bytes": shm.free}
    except OSError as err:
        facts["dev_shm"] = {"error": f"{type(err).__name__}: {err}"}
    return facts


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gather(device_type: str) -> dict:
    """Everything step 1 records, as a JSON-ready dict."""
    import trainer.cli  # noqa: F401  (a run's imports: this process's start is timed as a fresh run's)
    from trainer.capabilities import DeviceFacts, mode_support
    from trainer.environment import capture_environment, hardware_report, nvml_uuid

    defaults = tf32_defaults()  # before capture_environment, which reads the same switches
    facts: dict = {
        "device_type": device_type,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "tf32_defaults": defaults,
        "host": host_facts(),
    }
    torch_uuid = None
    if device_type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        # As NVML spells it, "GPU-..." or a MIG slice's "MIG-...", so that the two can be set side by side.
        torch_uuid = nvml_uuid(str(props.uuid), 0) if getattr(props, "uuid", None) else None
        facts["gpu_name"] = props.name
        facts["gpu_uuid"] = torch_uuid
        facts["gpu_count"] = torch.cuda.device_count()
    facts["nvml"] = nvml_facts(torch_uuid)
    if device_type == "cuda" and not torch.cuda.is_available():
        facts["error"] = "no CUDA GPU is visible to torch (see nvml: a driver older than this torch's CUDA?)"
        return facts
    device = torch.device(device_type)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        facts["environment"] = capture_environment(device)
        facts["hardware"] = hardware_report(device).to_dict()
        support = mode_support(DeviceFacts.of(device))
    facts["modes"] = {"supported": list(support.supported), "refused": support.refused, "same_as": support.same_as}
    facts["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_env", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="the device to describe")
    args = parser.parse_args(argv)
    print(json.dumps(gather(args.device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
