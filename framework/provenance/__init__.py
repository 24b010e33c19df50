"""Provenance: what produced a run (its code, git state, packages, command), how
to run it again, and how two runs differ.

- :mod:`.capture` writes ``source/``, ``environment.txt`` and run.json's
  ``provenance`` block at run start (and on resume, appended).
- :mod:`.rerun` trains a new run with the same config from the captured code.
- :mod:`.diff` compares two runs: config, code, git, packages, outcomes.
- :mod:`.show` gives the provenance block as text lines (``mindexp show``).

The submodules are imported on use: the runner imports ``capture`` only, and
``rerun``/``diff`` (which import the runner and the reports) stay off its path.
"""
