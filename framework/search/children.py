"""Child processes that end with the process that started them, and where
their output goes.

A sweep's or a search's workers train for minutes; when their parent is
killed (even with SIGKILL, which no handler sees) they must not go on
training as orphans. Linux's ``prctl(PR_SET_PDEATHSIG)`` has the kernel
signal the child when its parent dies; SIGTERM, so that the worker's own
handler records its run as interrupted (resumable) before it exits.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from typing import Iterator

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when
    the process that forked it exits. Returns the function to pass.

    The kernel ties the signal to the *thread* that forked: call Popen from
    the thread that lives as long as the parent (the main thread). Off Linux
    it does nothing (the children then outlive a killed parent).
    """
    parent = os.getpid()

    def _arm() -> None:
        if not sys.platform.startswith("linux"):
            return
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody would
        # ever send the signal, so send it now.
        if os.getppid() != parent:
            os.kill(os.getpid(), int(sig))
    return _arm


@contextlib.contextmanager
def output_to(path: str) -> Iterator[None]:
    """File descriptors 1 and 2 (so MindSpore's C++ messages too) to ``path``,
    appended, for the block: a worker's trial or point writes its own log."""
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "a", encoding="utf-8") as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])
