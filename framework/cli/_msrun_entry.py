"""The script msrun runs in each worker (msrun needs a file, not ``-m``)."""
import sys

# Run as a file, this folder would come first on sys.path, and its modules
# (config, data, run, ...) would shadow top-level ones: drop it; mindexp is
# imported from where it is installed.
del sys.path[0]

from mindexp.cli.main import console  # noqa: E402

if __name__ == "__main__":
    console()
