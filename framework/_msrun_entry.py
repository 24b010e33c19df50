"""The script msrun runs in each worker (msrun needs a file, not ``-m``)."""
import os
import sys

# Run as a file, this folder would come first on sys.path, and its modules
# (config, data, run, ...) would shadow top-level ones: put the repo root there.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from framework.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
