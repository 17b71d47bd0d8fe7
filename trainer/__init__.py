"""One training run and everything it needs: config, what can run on this device, precision, model, data and
loaders, the loop, measurement, results, environment, runs in a fresh process, and the command line.

The bottom layer: importable and runnable without Streamlit or a server (`python -m trainer run|compare`). It
imports none of `server/`, `lessons/`, `ui/` or Streamlit (the import-linter contracts in `.importlinter`).
"""
