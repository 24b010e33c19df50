"""Experiments shipped with mindexp, one module each."""
