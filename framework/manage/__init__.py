"""Living with many runs: find, show, tag, note and clean up run directories.

The command line's ``runs``, ``show``, ``tag``, ``note``, ``rm`` and ``gc``
are thin wrappers around these modules; they import no MindSpore.
"""
