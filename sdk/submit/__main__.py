"""`python -m sdk.submit ...`: the same as `fib-sdk submit ...` (same errors and exit statuses)."""
import sys

from ..cli import main

if __name__ == "__main__":
    main(["submit", *sys.argv[1:]], prog_name="python -m sdk.submit")
