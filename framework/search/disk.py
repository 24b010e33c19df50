"""A full disk in a sweep or a study: how a run's error says it, and space set
aside so that the storage and the records can still be written when it comes."""
from __future__ import annotations

import contextlib
import errno
import os

from .. import layout

FULL_DISK = os.strerror(errno.ENOSPC)   # in a run's error: no further run can succeed


def is_full_disk(error: str | None) -> bool:
    """``error`` (a run's or a trial's one line) says the disk was full."""
    return error is not None and FULL_DISK in error


def reserve_space(folder: str, items: int) -> None:
    """Set space aside in ``folder``, given back when the disk fills so that
    the storage and the record can still be written (about 1 KiB per item)."""
    with contextlib.suppress(OSError):  # best effort: the disk may be full already
        with open(os.path.join(folder, layout.SPACE_RESERVE), "wb") as f:
            f.write(b"\0" * (16384 + 1024 * items))


def release_space(folder: str) -> bool:
    """Give the reserved space back; False when there was none."""
    try:
        os.remove(os.path.join(folder, layout.SPACE_RESERVE))
    except OSError:
        return False
    return True
