"""Errors the SDK reports to users as one line, without a traceback."""


class BadInputError(ValueError):
    """A malformed or inconsistent user file (definition, workload line, config.toml, solution)."""
