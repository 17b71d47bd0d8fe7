"""Start the app: `python serve.py [streamlit run options]` is `streamlit run app.py` with its navigation settled.

Streamlit (1.67) serves an app whose script has a `pages/` folder beside it as a legacy multipage app until a
session has run app.py's st.navigation: until then a bookmark to /history runs that file alone (a sidebar of file
names, the narrow layout) and /run says "Page not found". No configuration option switches this off, so the flag
behind it is set here, before the server takes its first session.
"""

import os
import sys
from pathlib import Path

# Before torch is imported anywhere in the server: torch.cuda.is_available() asks NVML instead of initialising the
# CUDA driver in the Streamlit process (the server only lists GPUs; its jobs' children use them), and CUDA numbers
# GPUs in PCI order as NVML and nvidia-smi do, so an instructor's CUDA_VISIBLE_DEVICES=0,1 means nvidia-smi's 0 and 1
# (CUDA's default order is fastest first). Both pass on to the children, which pin their GPU by UUID anyway.
SERVER_ENVIRONMENT = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
for name, value in SERVER_ENVIRONMENT.items():
    os.environ.setdefault(name, value)

from streamlit.runtime.pages_manager import PagesManager  # noqa: E402 (after the environment above)
from streamlit.web import cli  # noqa: E402

from server.history import HistoryStore  # noqa: E402
from server.settings import Settings  # noqa: E402
from trainer.errors import TrainerError  # noqa: E402

APP = Path(__file__).resolve().parent / "app.py"


def open_state() -> None:
    """Open the state folder before serving: an older schema is upgraded now (after a copy), not in a learner's first
    page, and a newer or foreign one, or settings that are wrong, stop the server with their one line."""
    try:
        HistoryStore(Settings.from_env().history_path)
    except TrainerError as err:
        sys.exit(f"amp-lab: {err}")


if __name__ == "__main__":
    open_state()
    PagesManager.uses_pages_directory = False  # app.py's st.navigation lists the pages; never serve the folder
    cli.main(["run", str(APP), *sys.argv[1:]], prog_name="streamlit")
