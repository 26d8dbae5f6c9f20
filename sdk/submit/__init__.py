"""Packaging gated solutions as a contest submission (`fib-sdk submit`); layout and decisions in README.md.

- evidence: write_evidence / load_evidence, the committed record of a gate run, checked against the sources;
- rules: the contest's source rules (no flashinfer/deep_gemm at run time, no binaries, no network);
- results, ledger: the benchmark rows and the cost ledger that travel beside the sources;
- build: dist/submission/ and its reproducible tar.gz; commands: the click command.

The names below are imported on first use, so that `fib-sdk submit --help` does not load torch.
"""
import importlib

_EXPORTS = {"Submission": ".build", "build_submission": ".build", "Evidence": ".evidence",
            "load_evidence": ".evidence", "write_evidence": ".evidence", "check_package": ".rules",
            "enforce": ".rules"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
