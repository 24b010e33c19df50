"""Hyper-parameter search on Optuna: ``mindexp tune`` and :func:`tune`.

Optuna is the optional extra ``mindexp[tune]``; it is imported only when a
study is made or read. Every trial is a normal run directory (label
``trial-<n>``, run.json naming ``study`` and ``trial``) under
``<out>/studies/<study>/``, beside the study's journal file, its logs and
its plots. The public functions live in :mod:`.api` (``tune``, ``sweep``)
and :mod:`.results` (``study_frame``); this package only names them.
"""
from __future__ import annotations

from .api import sweep, tune
from .results import study_frame

__all__ = ["tune", "study_frame", "sweep"]
