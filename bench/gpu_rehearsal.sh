#!/bin/bash
# The GPU kit's rehearsal (docs/gpu-check.md, "Rehearsal"): the window's two device commands from docs/gpu-check.md,
# run on this CPU the way a lent GPU machine (an H100 or an H200) runs them. Not part of `make test` (the first build
# downloads several GB).
#   1. once: a Python 3.12 environment with torch 2.11.0 and the GPU machines' image's other packages that the kit
#      imports, and nothing the image lacks (Streamlit, Altair and their needs come only from the wheels, as there);
#   2. once: the wheels (bench/gpu_wheels.sh) when .gpu-wheels/ is missing;
#   3. a copy of what the device tool carries: tracked files, untracked files git does not ignore, and .gpu-wheels/,
#      refused over the tool's 64 MiB;
#   4. the window's two calls, read from docs/gpu-check.md (the first try, then step 1 and the ladder: --only 1,7),
#      in that copy, each with its own $OUT, `--device cpu --quick` added to the kit and the wheels' target moved
#      from /tmp/site into the rehearsal's folder;
#   5. each call's report checked: its chosen steps ok (step 2 skipped for want of a GPU), the kit within its
#      budget, what $OUT holds within what the device tool brings back and no temporary there; then step 2's
#      CUDA-only tests collected there;
#   6. the trainer, lessons, server and bench tests (not slow) under that torch.
#
#   bench/gpu_rehearsal.sh            (run from the repository root; make gpu-rehearsal)
# Environment: REHEARSAL_DIR (default .rehearsal, git-ignored), PY312 (a Python 3.12 to build from),
# REHEARSAL_SLOW_START_S (default 0: every Python process the two calls start sleeps this long as it starts, as on a
# machine whose processes start slowly; the kit must still end each call with every step ok within its budget).
set -euo pipefail

ROOT=$(pwd)
DIR=${REHEARSAL_DIR:-$ROOT/.rehearsal}
ENV=$DIR/venv
SLOW_START_S=${REHEARSAL_SLOW_START_S:-0}
say() { echo "gpu-rehearsal: $*"; }
fail() { echo "gpu-rehearsal: $*" >&2; exit 1; }
[ -f docs/gpu-check.md ] && [ -d bench ] || fail "run it from the repository root (docs/gpu-check.md not found)"

# The GPU machines' torch as KINDS.md read it (2.11.0+cu130, torchvision 0.26.0, numpy 2.5.2 on Python 3.12.3). PyPI's
# torch 2.11.0 is a CUDA build too; on this CPU it runs its CPU kernels, as the kit's --device cpu asks.
TORCH_PACKAGES="torch==2.11.0 torchvision==0.26.0 numpy==2.5.2"
# Of the GPU machines' image's package list (read 2026-11-17), the ones this project's kit, trainer and app import,
# and the ones Streamlit and Altair need that the wheels leave to the image. Versions there are not known: PyPI's newest
# that pip here allows. Nothing outside that list goes in: a missing import must fail here as it would there.
IMAGE_PACKAGES="pandas pyarrow pillow protobuf requests click jinja2 anyio h11 attrs narwhals nvidia-ml-py psutil
pytest packaging typing-extensions"

find_python312() {
    if [ -n "${PY312:-}" ]; then echo "$PY312"; return; fi
    if command -v python3.12 >/dev/null && python3.12 -c "" 2>/dev/null; then command -v python3.12; return; fi
    if command -v pyenv >/dev/null; then
        local version
        version=$(pyenv versions --bare 2>/dev/null | grep -m1 '^3\.12' || true)
        if [ -n "$version" ]; then echo "$(pyenv root)/versions/$version/bin/python3.12"; return; fi
    fi
    return 1
}

build_environment() {
    local python
    python=$(find_python312) || fail "no Python 3.12 found (set PY312=/path/to/python3.12)"
    say "building $ENV from $($python --version) (once; torch 2.11.0 is a CUDA build of several GB)"
    rm -rf "$ENV"
    mkdir -p "$DIR"
    "$python" -m venv "$ENV"
    # shellcheck disable=SC2086  # lists of requirements
    "$ENV/bin/python" -m pip install --quiet --disable-pip-version-check $TORCH_PACKAGES $IMAGE_PACKAGES \
        >"$DIR/build.log" 2>&1 || { grep -v "is ignored: it is neither" "$DIR/build.log" | tail -5
                                    fail "the environment did not install: $DIR/build.log"; }
    # Streamlit must not be there: the device command's wheels bring it, or step 5 says it is missing.
    if "$ENV/bin/python" -c "import streamlit" 2>/dev/null; then
        fail "streamlit got into $ENV: it must come from the wheels"
    fi
    "$ENV/bin/python" -m pip freeze --disable-pip-version-check >"$ENV/freeze.txt"
    touch "$ENV/.built"
}

started=$(date +%s)
if [ ! -f "$ENV/.built" ]; then  # not `|| build_environment`: set -e does not reach a function called there
    build_environment
fi
say "environment: $("$ENV/bin/python" -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")')"
# A slower start for every Python the two calls start: a .pth line runs in each Python as it starts (the calls' pip,
# the kit and its children), and sleeps only where the calls' environment sets GPU_REHEARSAL_SLOW_START_S.
SITE=$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo 'import os, time; time.sleep(float(os.environ.get("GPU_REHEARSAL_SLOW_START_S") or 0))' \
    >"$SITE/gpu_rehearsal_slow_start.pth"
[ -d .gpu-wheels ] || PY=.venv/bin/python bench/gpu_wheels.sh .gpu-wheels

# What the device tool carries: the working tree as git sees it (ignored files stay behind) and the carried folder.
TREE=$DIR/tree
rm -rf "$TREE"
mkdir -p "$TREE"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' path; do
    [ -e "$path" ] && printf '%s\0' "$path"
done | tar --null -T - -cf - | tar -xf - -C "$TREE"
cp -r .gpu-wheels "$TREE/.gpu-wheels"
carried_bytes=$(du -sb "$TREE" | cut -f1)
carried_mib=$(awk -v b="$carried_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
[ "$carried_bytes" -le $((64 * 1048576)) ] || fail "the carried tree is $carried_mib MiB, over the device's 64 MiB"
say "carried tree: $carried_mib MiB ($(find "$TREE/.gpu-wheels" -name '*.whl' | wc -l) wheels included)"

# rehearse NAME CALL STEPS: the window's call number CALL exactly as docs/gpu-check.md gives it
# (bench/device_command.py, which the tests read too), run as a GPU machine runs it (a plain python3 that holds
# torch, no project .venv, a fresh $OUT, the wheels installed again), then its report checked: STEPS (step numbers)
# each "ok", step 2 "skipped: no GPU" where chosen, the others skipped as not chosen; the kit within its budget;
# $OUT within what the device tool brings back, no temporary there.
rehearse() {
    local name=$1 call=$2 steps=$3 out=$DIR/out-$1 command rehearsed started status
    command=$("$ENV/bin/python" -m bench.device_command "$call") || fail "no call $call in docs/gpu-check.md"
    [ "$(wc -c <<<"$command")" -le 2000 ] || fail "call $call is over the device tool's 2,000 characters"
    rehearsed=${command//--out \$OUT/--out \$OUT --device cpu --quick}
    rehearsed=${rehearsed//\/tmp\/site/$DIR/site-$name}
    rm -rf "$out" "$DIR/site-$name"
    mkdir -p "$out"
    say "$name: call $call of docs/gpu-check.md with --device cpu --quick, in $TREE" \
        "(every Python process ${SLOW_START_S} s slower to start)"
    started=$(date +%s)
    set +e
    (cd "$TREE" && env -u PYTHONPATH -u VIRTUAL_ENV PATH="$ENV/bin:$PATH" OUT="$out" \
        GPU_REHEARSAL_SLOW_START_S="$SLOW_START_S" bash -c "$rehearsed")
    status=$?
    set -e
    say "$name: exit status $status after $(( $(date +%s) - started )) s"
    "$ENV/bin/python" - "$out" "$status" "$steps" "$SLOW_START_S" <<'PY'
import json, pathlib, re, sys
out, status, chosen = pathlib.Path(sys.argv[1]), int(sys.argv[2]), {int(n) for n in sys.argv[3].split(",")}
slow_start_s = float(sys.argv[4])
missing = [n for n in ("gpu-check.json", "gpu-check.md", "gpu-check.log") if not (out / n).is_file()]
if missing:
    sys.exit(f"gpu-rehearsal: missing in $OUT: {', '.join(missing)}")
# What the device tool brings back from $OUT (its README): at most 8 files, 16 MiB each, 64 MiB in all, no more
# than two folders down, names of letters, digits, '.', '_' and '-'. Anything else would be left there.
files = [path for path in out.rglob("*") if path.is_file()]
limits = [f"{len(files)} files (8 come back)"] if len(files) > 8 else []
for path in files:
    relative = path.relative_to(out)
    if path.stat().st_size > 16 * 2**20 or len(relative.parts) > 3 or not all(
            re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in relative.parts):
        limits.append(f"{relative} would not come back")
    if path.suffix in (".partial", ".tmp"):
        limits.append(f"{relative} is a temporary")
if sum(path.stat().st_size for path in files) > 64 * 2**20:
    limits.append("over 64 MiB in all")
print(f"  $OUT: {len(files)} files, {sum(p.stat().st_size for p in files) / 2**10:.0f} KiB: "
      + ", ".join(sorted(str(p.relative_to(out)) for p in files)))
report = json.loads((out / "gpu-check.json").read_text())
kit, plan = report["kit"], report["kit"]["time_plan"]
print(f"  the kit: {kit['duration_s']:.0f} s of its {kit['plan']['budget_s']:.0f} s budget; its time plan: "
      + (f"a fresh process {plan['process_start_s']:.1f} s (measured: {plan['measured']}), {plan['estimate_s']:.0f} s "
         f"estimated for {plan['time_left_s']:.0f} s, left out: {', '.join(plan['left_out']) or 'nothing'}"))
bad = []
if kit["duration_s"] > kit["plan"]["budget_s"]:
    bad.append(f"the kit took {kit['duration_s']:.0f} s, over its budget of {kit['plan']['budget_s']:.0f} s")
if 1 in chosen and not report["steps"][0]["data"].get("process_start_s", 0) >= slow_start_s:
    bad.append(f"step 1 did not time the slower start ({slow_start_s:g} s)")
for step in report["steps"]:
    number, state, reason = step["number"], step["status"], step.get("reason")
    print(f"  step {number} {step['name']}: {state}" + (f": {reason}" if reason else ""))
    if step["name"] == "summary" or (number == 2 and (state, reason) == ("skipped", "no GPU")):
        continue
    if (number in chosen) != (state == "ok"):
        bad.append(f"step {number}: {state}: {reason}")
if bad or limits or status:
    sys.exit("gpu-rehearsal: FAILED: " + "; ".join(bad + limits or [f"exit status {status}"]))
PY
}

# The window's two calls (docs/gpu-check.md): the first try, then step 1 and the ladder.
kit_started=$(date +%s)
rehearse first-try 1 1,2,3,4,5,6
rehearse ladder 2 1,7
kit_s=$(( $(date +%s) - kit_started ))

# Step 2 cannot run its tests on a CPU; what can fail before a GPU is touched is their collection (an import the
# machine lacks): collect exactly the files and tests step 2 would run, with this environment and the wheels.
collected=$(cd "$TREE" && PYTHONPATH="$DIR/site-first-try" "$ENV/bin/python" - <<'PY'
import subprocess, sys
from pathlib import Path
from bench.cuda_only import gpu_test_files
files = [str(path) for path in gpu_test_files(Path("tests"))]
done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "bench.cuda_only",
                       "--collect-only", *files], capture_output=True, text=True)
last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()
if done.returncode:
    sys.exit(f"gpu-rehearsal: step 2's tests do not collect (pytest exit {done.returncode}): {last}")
print(f"{len(files)} files: {last}")
PY
) || exit 1
say "step 2's CUDA-only tests collect as the kit would collect them on the GPU: $collected"
# The code must run on the GPU machines' torch too, not only the kit: the suites of the layers below the app (trainer,
# lessons, server, bench) under this environment, their slow tests and the kit's own left out (the kit ran above).
# It found that torch 2.11 casts past e4m3's range to NaN where 2.14.1 saturates.
say "the trainer, lessons, server and bench tests (not slow) under $("$ENV/bin/python" -c 'import torch; print(torch.__version__)')"
if (cd "$TREE" && PYTHONPATH="$DIR/site-first-try" "$ENV/bin/python" -m pytest -q -p no:cacheprovider \
        tests/trainer tests/lessons tests/server tests/bench -m "not slow" --ignore=tests/bench/test_gpu_check.py) \
        >"$DIR/tests.log" 2>&1; then
    say "$(tail -1 "$DIR/tests.log")"
else
    grep -E "^(FAILED|ERROR) " "$DIR/tests.log" || tail -5 "$DIR/tests.log"
    fail "tests failed under the GPU machines' torch: $DIR/tests.log"
fi
rm -rf "$TREE"  # a copy of the project: left only when something failed, to look into
say "passed in $(( $(date +%s) - started )) s (the two calls $kit_s s; carried $carried_mib MiB)"
