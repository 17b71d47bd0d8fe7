"""The trainer's lab harness against the lab's own script: `python -m trainer run --loader lab` beside
`lab/fp32_baseline.py`, on the same images and batch, alternately, each in a fresh process.

    python -m bench.lab_harness [--subset 5120] [--epochs 1] [--batch-size 256] [--repeats 3] [--json PATH]

The images are the synthetic split written in CIFAR-10's own on-disk format, so that both read the very same
files: the trainer through trainer/cifar10.py, the lab script through torchvision's CIFAR10 (whose checksum test,
made for the real download, is switched off for these files: nothing else of the script is changed). Both time
the same span, the epochs from the first batch on, as the lab does. Prints a table and the ratio of the medians,
and writes them as JSON; the issue's target is a ratio within 10%.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from trainer.capabilities import resolve_device
from trainer.child_process import REPO_ROOT, run_python
from trainer.cifar10 import FOLDER, META_FILE, TEST_FILES, TRAIN_FILES
from trainer.environment import capture_environment
from trainer.loaders import load_split

TARGET = 0.10  # the trainer's lab harness within 10% of the lab's script
RUN_TIMEOUT_S = 1800
# The lab script as it is, with torchvision's checksum test of the real CIFAR-10 download switched off.
LAB_SCRIPT = ("import runpy, sys; import torchvision.datasets.cifar as cifar; "
              "cifar.check_integrity = lambda *args, **kwargs: True; "
              "sys.argv = ['fp32_baseline.py', *sys.argv[1:]]; runpy.run_path({path!r}, run_name='__main__')")


def write_cifar10_files(root: Path, subset: int, test_images: int) -> None:
    """The synthetic split's first `subset` training and `test_images` test images as CIFAR-10's pickles. The real
    files were pickled by Python 2, whose str keys torchvision reads as str and trainer/cifar10.py as bytes; Python 3
    cannot write that type, so each key is written both ways, over the same (pickled once) arrays."""
    folder = root / FOLDER
    folder.mkdir(parents=True)
    for train, names, count in ((True, TRAIN_FILES, subset), (False, TEST_FILES, test_images)):
        split = load_split("synthetic", str(root), train=train, limit=count)
        rows = split.images.transpose(0, 3, 1, 2).reshape(len(split), -1)  # HWC -> the pickles' channel planes
        for name, part in zip(names, range(len(names))):
            chunk = slice(part * len(rows) // len(names), (part + 1) * len(rows) // len(names))
            with open(folder / name, "wb") as handle:
                pickle.dump(_both_keys({"data": rows[chunk], "labels": split.labels[chunk].tolist()}), handle,
                            protocol=2)
    with open(folder / META_FILE, "wb") as handle:
        pickle.dump(_both_keys({"label_names": [name.encode() for name in split.classes]}), handle, protocol=2)


def _both_keys(entries: dict) -> dict:
    return {**entries, **{key.encode(): value for key, value in entries.items()}}


def run_lab_script(workdir: Path, args: argparse.Namespace) -> float:
    done = run_python(["-c", LAB_SCRIPT.format(path=str(REPO_ROOT / "lab" / "fp32_baseline.py")),
                       "--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--subset",
                       str(args.subset)], timeout_s=RUN_TIMEOUT_S, cwd=workdir)
    found = re.search(r"Finished fp32 training in (\d+\.\d+) seconds", done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the lab script failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return float(found.group(1))


def run_trainer(workdir: Path, args: argparse.Namespace) -> float:
    out = workdir / "trainer.json"
    done = run_python(["-m", "trainer", "run", "--precision", "fp32-default", "--loader", "lab", "--data", "cifar10",
                       "--data-root", str(workdir / "data"), "--epochs", str(args.epochs), "--batch-size",
                       str(args.batch_size), "--subset", str(args.subset), "--test-subset", "256", "--device",
                       args.device, "--json", str(out)], timeout_s=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"the trainer failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(out.read_text())["total_time_s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lab_harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subset", type=int, default=5120, help="training images (default 5120: 20 steps at 256)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="pairs, lab script and trainer alternately")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the lab script picks the GPU "
                        "when there is one: say cuda there")
    parser.add_argument("--json", default=None, help="default: bench/results/lab-harness-<device>-<date>.json")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"lab script": [], "trainer --loader lab": []}
    with tempfile.TemporaryDirectory(prefix="amp-lab-harness-") as temporary:
        workdir = Path(temporary)
        write_cifar10_files(workdir / "data", args.subset, 256)
        for repeat in range(args.repeats):
            for name, run in (("lab script", run_lab_script), ("trainer --loader lab", run_trainer)):
                times[name].append(run(workdir, args))
                print(f"pair {repeat + 1}: {name}: {times[name][-1]:.2f} s", flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["trainer --loader lab"] / medians["lab script"]
    print("\n| run | seconds, each pair | median |\n|---|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {medians[name]:.2f} |")
    verdict = "met" if abs(ratio - 1) <= TARGET else "not met"
    print(f"\ntrainer / lab script: {ratio:.3f} (target: within {TARGET:.0%}: {verdict})")
    default = REPO_ROOT / "bench" / "results" / f"lab-harness-{args.device}-{time.strftime('%Y-%m-%d')}.json"
    path = Path(args.json or default)
    path.write_text(json.dumps({"command": " ".join(["python -m bench.lab_harness", *(argv or sys.argv[1:])]),
                                "settings": vars(args), "seconds": times, "medians": medians, "ratio": ratio,
                                "target": TARGET, "verdict": verdict,
                                "environment": capture_environment(resolve_device(args.device))}, indent=2) + "\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
