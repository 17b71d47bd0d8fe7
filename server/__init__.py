"""The class server: the job queue and its worker, the job records, the shared history, the instructor's settings,
wait estimates and the largest-batch probe.

It runs learners' jobs through `trainer` (each run in its own process) and knows nothing of pages: it imports
`trainer/` only, never `lessons/`, `ui/` or Streamlit (the import-linter contracts in `.importlinter` check this).
"""
