"""`python -m sdk.submit ...`: the submit command on its own (the same as `fib-sdk submit`)."""
from .commands import submit

if __name__ == "__main__":
    submit()
