"""Keep the files MindSpore writes while compiling inside the run directory.

MindSpore 2.10 writes ``rank_<id>/om/analyze_fail.ir`` when a graph fails to
compile, under the folder named by the environment variable ``MS_OM_PATH``
(read at each failure; the working directory when unset). Neither
``set_context(save_graphs_path=...)`` nor ``MS_DEV_SAVE_GRAPHS_PATH`` moves
it (checked on 2.10; tests/test_failures.py holds the contract test). AMP O1
writes ``rewritten_network/`` into the working directory: see
``train.session._amp``, which changes the directory for that call only.
"""
from typing import Iterator
import contextlib
import os

OM_PATH_ENV = "MS_OM_PATH"


@contextlib.contextmanager
def kept_in(run_dir: str) -> Iterator[None]:
    """Point MindSpore's compile-failure dumps at ``run_dir`` for the block
    (``<run_dir>/rank_0/om/analyze_fail.ir``); the old value is restored after.
    A ``MS_OM_PATH`` the user set explicitly wins."""
    old = os.environ.get(OM_PATH_ENV)
    if old is None:
        os.environ[OM_PATH_ENV] = os.path.abspath(run_dir)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(OM_PATH_ENV, None)
