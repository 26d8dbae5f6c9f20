"""Packaging gated solutions as a contest submission (`fib-sdk submit`); layout and decisions in README.md.

- evidence: write_evidence / load_evidence, the committed record of a gate run, checked against the sources;
- rules: the contest's source rules (no flashinfer/deep_gemm at run time, no binaries, no network);
- results, ledger: the benchmark rows and the cost ledger that travel beside the sources;
- build: dist/submission/ and its reproducible tar.gz; commands: the click command.
"""
from .build import Submission, build_submission  # noqa: F401
from .evidence import Evidence, load_evidence, write_evidence  # noqa: F401
from .rules import check_package, enforce  # noqa: F401
