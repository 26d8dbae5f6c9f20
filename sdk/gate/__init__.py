"""The correctness gate: FlashInfer-Bench main's evaluation plus a stricter layer (see evaluate.py)."""
from .compare import Check, Tolerance, contest_tolerance  # noqa: F401
from .runner import GateResult, gate_solution  # noqa: F401
