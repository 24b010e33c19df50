"""Provenance: what produced a run (its code, git state, packages, command).

- :mod:`.capture` writes ``source/``, ``environment.txt`` and run.json's
  ``provenance`` block at run start (and on resume, appended).
- :mod:`.files` reads them back (the block, the captured source, the packages).

Rerunning a run from its captured code and comparing two runs are
``manage.rerun`` and ``manage.diff``, which build on these.
"""
