"""Performance benchmarks: `python benchmarks/run.py`; not run by CI."""
