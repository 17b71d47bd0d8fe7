"""The image's HEALTHCHECK: exit 0 when Streamlit answers 200 on /_stcore/health at the port the container serves."""

import os
import sys
import urllib.request

port = os.environ.get("STREAMLIT_SERVER_PORT", "8501")
base = os.environ.get("STREAMLIT_SERVER_BASE_URL_PATH", "").strip("/")
url = f"http://127.0.0.1:{port}/{base + '/' if base else ''}_stcore/health"
try:
    with urllib.request.urlopen(url, timeout=5) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError as err:
    sys.exit(f"{url}: {err}")
