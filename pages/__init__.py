"""One thin file per page, run by Streamlit through `app.py`'s navigation: wording and layout only."""
