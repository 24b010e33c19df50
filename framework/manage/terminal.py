"""Text from run records shown on a terminal: never a raw control character.

A note or a tag is whatever its writer typed, and a shared output folder
holds records written by anyone: ESC, BEL or a C1 control printed raw could
recolour, retitle or rewrite the terminal that lists it. Tables and ``show``
escape them always (``\\x1b``, visible), and so does ``--csv`` (a file or a
pipe is read on a terminal later); ``--json`` keeps the data exact (JSON
escapes them itself), escaped again only when standard output is a terminal.
"""
from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (0x9b is a one-byte CSI)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PRINTABLE_ASCII = bytes(range(0x20, 0x7f))  # ASCII text without these: its controls
_STRUCTURAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and line end


def visible(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``): one line, inert."""
    return _CONTROL.sub(_escaped, text)


def has_control(text: str) -> bool:
    """Whether :func:`visible` would change ``text``."""
    if text.isascii():   # most text (paths, statuses): bytes searched 5x faster than re
        return bool(text.encode("ascii").translate(None, _PRINTABLE_ASCII))
    return _CONTROL.search(text) is not None


def visible_lines(text: str) -> str:
    """``text`` with its control characters escaped but its line ends and tabs kept."""
    return _STRUCTURAL.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{ord(char):02x}")
