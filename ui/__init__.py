"""What pages share: Streamlit glue (session, widgets, following jobs) and code with no Streamlit in it that
pages use (chart builders, the experiment's choices, exports, the sentence that interprets a result).

With `app.py` and `pages/`, the only code that imports Streamlit. It imports `server/`, `lessons/` and
`trainer/`, never `pages/` (the import-linter contracts in `.importlinter`).
"""
