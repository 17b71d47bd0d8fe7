"""The teaching maths that is not a training run: number formats, underflow and loss scaling, the scaler
simulator, the autocast trace, the activation/gradient capture, and when AMP pays off (sweep plans and verdicts).

It imports `trainer/` only where it needs the model, the data or a run's records; never `server/`, `ui/` or
Streamlit (the import-linter contracts in `.importlinter` check this).
"""
