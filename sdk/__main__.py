"""`python -m sdk`: the `fib-sdk` command."""
import sys

try:
    from .cli import main
except ModuleNotFoundError as exc:  # click itself is missing: no click to format the error with
    sys.stderr.write(f"error: {exc}: this Python lacks a package that fib-sdk needs ({sys.executable}); "
                     "install the SDK as the README's 'Install' says, or use `nox -s tests|submit`\n")
    sys.exit(4)

if __name__ == "__main__":
    main(prog_name="fib-sdk")
