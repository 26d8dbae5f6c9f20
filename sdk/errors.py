"""Errors the SDK reports to users as one line, without a traceback, and the exit status of each kind.

`fib-sdk` prints every error as one line, `error: <what>`, on stderr, and exits with the status of its kind:

    0  done (and, for gate and bench, every workload PASSED / at least one row PASSED)
    1  the command ran and its result is a failure: a gate workload that is not PASSED, a bench run in which no
       row PASSED, re-rendered sources that drifted
    2  usage: an unknown option, a bad option value, a missing argument (`fib-sdk COMMAND --help`)
    3  bad input: a malformed or unknown user file or name (definition, workload, config.toml, solution,
       evidence, results), or a refused submission
    4  this machine lacks something the command needs: a CUDA device, an optional package
   70  an internal error (a bug in fib-sdk); FIB_SDK_TRACEBACK=1 prints its traceback
  130  interrupted (Ctrl-C)
"""
from __future__ import annotations

EXIT_FAILED, EXIT_USAGE, EXIT_INPUT, EXIT_UNAVAILABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 2, 3, 4, 70, 130


class BadInputError(ValueError):
    """A malformed or inconsistent user file (definition, workload line, config.toml, solution)."""


class UnavailableError(RuntimeError):
    """Something this machine lacks: a CUDA device, an optional package (exit status 4)."""


def one_line(exc: BaseException, limit: int = 3) -> str:
    """A validation error as one short line: pydantic's errors as `field: message` (no input dump, no URL);
    anything else as its first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False, include_input=False)
        except TypeError:  # not a pydantic ValidationError after all
            items = None
        if items:
            parts = []
            for item in items[:limit]:
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "__root__")
                message = str(item.get("msg", "")).removeprefix("Value error, ").splitlines()[0]
                parts.append(f"{where}: {message}" if where else message)
            more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
            return "; ".join(parts) + more
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
