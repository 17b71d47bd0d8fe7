"""The device command that docs/gpu-check.md gives for the lent GPU, read from the page itself.

One reader for the tests that check the command (tests/bench) and for the rehearsal that runs it on this CPU
(bench/gpu_rehearsal.sh), so the command they check is the one a person copies. `python -m bench.device_command`
prints it.
"""

from __future__ import annotations

import re
from pathlib import Path

GPU_CHECK_DOC = Path(__file__).resolve().parent.parent / "docs" / "gpu-check.md"
DEVICE_COMMAND_LIMIT = 2000  # characters: the device tool's limit on one command
KIT_INTO_OUT = "bench.gpu_check --out $OUT"


def documented_device_command(doc: Path = GPU_CHECK_DOC) -> str:
    """The one bash block of `doc` that installs the wheels and runs the kit into $OUT."""
    blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    matches = [block for block in blocks if KIT_INTO_OUT in block and "pip install" in block]
    if len(matches) != 1:
        raise ValueError(f"{doc} should give one device command (a bash block with pip install and "
                         f"{KIT_INTO_OUT!r}); it gives {len(matches)}")
    return matches[0]


if __name__ == "__main__":
    print(documented_device_command(), end="")
