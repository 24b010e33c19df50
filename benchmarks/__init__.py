"""Performance benchmarks (issue 7): `python benchmarks/run.py`; not run by CI."""
