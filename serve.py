"""Start the app: `python serve.py [streamlit run options]` is `streamlit run app.py` with its navigation settled.

Streamlit (1.67) serves an app whose script has a `pages/` folder beside it as a legacy multipage app until a
session has run app.py's st.navigation: until then a bookmark to /history runs that file alone (a sidebar of file
names, the narrow layout) and /run says "Page not found". No configuration option switches this off, so the flag
behind it is set here, before the server takes its first session.
"""

import sys
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web import cli

APP = Path(__file__).resolve().parent / "app.py"

if __name__ == "__main__":
    PagesManager.uses_pages_directory = False  # app.py's st.navigation lists the pages; never serve the folder
    cli.main(["run", str(APP), *sys.argv[1:]], prog_name="streamlit")
