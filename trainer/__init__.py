"""AMP Lab's training engine: fp32 and mixed-precision runs of the lab's CNN, measured honestly.

Nothing in this package imports streamlit; the app, the command line and the tests all drive it.
"""
