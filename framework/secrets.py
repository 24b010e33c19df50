"""The one masking rule for credentials in URLs: what records, messages,
the dashboard and the MLflow export show instead of a password.

A storage URL (``postgresql+psycopg://user:PASSWORD@host/db``), an MLflow
tracking URI (``https://user:TOKEN@host``) or any catalog URL may carry a
credential. Whatever mindexp writes to disk, prints, serves or uploads goes
through :func:`masked` first, so the password is ``***`` everywhere but in
the process that connects (workers get the real URL through their
environment, never their command line).
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

MASK = "***"

# scheme://user:PASSWORD@ -- greedy up to the last "@" of the word: a password
# holding a raw "@" is masked whole (masking too much is the safe side).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)[^\s]*@")
# ?password=... in a query string (libpq's and several drivers' spelling)
_QUERY = re.compile(r"(?P<head>[?&;](?:password|passwd|pwd|token|secret)=)[^&;\s]*",
                    re.IGNORECASE)


def masked(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``
    (``user:PASSWORD@`` and ``password=`` in a query); anything else unchanged."""
    text = _USERINFO.sub(lambda m: m.group("head") + MASK + "@", text)
    return _QUERY.sub(lambda m: m.group("head") + MASK, text)


# An environment variable named like a credential is masked whole, whatever its value.
SECRET_NAME_WORDS = ("URL", "URI", "TOKEN", "PASSWORD", "SECRET", "KEY")


def masked_environment(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as they may be recorded: the value of each whose
    name holds one of :data:`SECRET_NAME_WORDS` (any case) is ``***``, every
    other value :func:`masked` (a URL's password in any variable)."""
    return {name: MASK if any(word in name.upper() for word in SECRET_NAME_WORDS)
            else masked(str(value)) for name, value in env.items()}


def masked_argv(argv: Sequence[str]) -> list[str]:
    """A command line as it may be recorded: each argument :func:`masked`."""
    return [masked(str(arg)) for arg in argv]


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password that :func:`masked` would hide."""
    return masked(url) != url
