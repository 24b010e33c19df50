"""The script msrun runs in each worker (msrun needs a file, not ``-m``)."""
import sys

from framework.cli import main

if __name__ == "__main__":
    sys.exit(main())
