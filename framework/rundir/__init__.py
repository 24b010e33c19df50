"""The run directory: its files, run.json, the atomic write, and reading a run back."""
