"""The flashinfer-bench pydantic models this SDK reads and writes, imported in one place.

flashinfer-bench is installed with --no-deps (see README): only its `data` models are used here.
"""
from flashinfer_bench.data import (  # noqa: F401
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    Solution,
    SourceFile,
    Trace,
    Workload,
)
