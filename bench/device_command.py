"""The device commands that docs/gpu-check.md gives for the lent GPU's window, read from the page itself.

One reader for the tests that check the commands (tests/bench) and for the rehearsal that runs them on this CPU
(bench/gpu_rehearsal.sh), so the commands they check are the ones a person pastes. The window has two calls, in the
page's order: the first try, then the second call (the same command with `--only 1,7`: step 1, then the ladder).
`python -m bench.device_command N` prints call N (1 or 2).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

GPU_CHECK_DOC = Path(__file__).resolve().parent.parent / "docs" / "gpu-check.md"
DEVICE_COMMAND_LIMIT = 2000  # characters: the device tool's limit on one command
KIT_INTO_OUT = "bench.gpu_check --out $OUT"
SECOND_CALL = f"{KIT_INTO_OUT} --only 1,7"


def documented_calls(doc: Path = GPU_CHECK_DOC) -> list[str]:
    """The bash blocks of `doc` that install the wheels and run the kit into $OUT: the first try, then the second
    call; ValueError when the page does not give exactly those two."""
    blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    calls = [block for block in blocks if KIT_INTO_OUT in block and "pip install" in block]
    if len(calls) != 2 or "--only" in calls[0] or SECOND_CALL not in calls[1]:
        raise ValueError(f"{doc} should give the window's two device commands (bash blocks with pip install and "
                         f"{KIT_INTO_OUT!r}), the first try, then the second call with {SECOND_CALL!r}; it gives "
                         f"{len(calls)}")
    return calls


def documented_device_command(doc: Path = GPU_CHECK_DOC) -> str:
    """The first try's command."""
    return documented_calls(doc)[0]


if __name__ == "__main__":
    print(documented_calls()[int(sys.argv[1]) - 1 if len(sys.argv) > 1 else 0], end="")
