#!/bin/sh
# Wheels for a GPU machine that has its own torch but no Streamlit and no internet (docs/gpu-check.md): Streamlit,
# Altair and what they need that such a machine lacks, at the versions this project's .venv runs, for CPython 3.12
# on x86-64 Linux. The folder (git-ignored) travels with the working tree; there, before the kit:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-wheels/*.whl
#   export PYTHONPATH=/tmp/site
#
#   bench/gpu_wheels.sh [FOLDER]     (default .gpu-wheels; run from the repository root, with internet)
set -eu

DEST=${1:-.gpu-wheels}
PY=${PY:-.venv/bin/python}
# Missing from the H200 image's package list as read on 2026-11-17 (torch, numpy, pandas, pyarrow, pillow, protobuf,
# requests, click, jinja2, anyio, h11, attrs, narwhals, nvidia-ml-py, psutil and pytest are there). Streamlit's own
# needs first, then Altair's.
PACKAGES="streamlit altair pydeck starlette uvicorn python-multipart websockets itsdangerous watchdog
jsonschema jsonschema-specifications referencing rpds-py"
# The platform tags pip must match exactly: manylinux 2.17 to 2.39 cover every wheel of these packages.
PLATFORMS="--platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for minor in 17 24 27 28 31 34 35 39; do PLATFORMS="$PLATFORMS --platform manylinux_2_${minor}_x86_64"; done

rm -rf "$DEST"
mkdir -p "$DEST"
for name in $PACKAGES; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    [ -n "$version" ] || { echo "gpu_wheels: $name is not installed in $PY's environment" >&2; exit 1; }
    # shellcheck disable=SC2086  # PLATFORMS is a list of options
    "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp $PLATFORMS -d "$DEST" "$name==$version"
done
echo "gpu_wheels: $(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST (the device carries at most 64 MiB)"
