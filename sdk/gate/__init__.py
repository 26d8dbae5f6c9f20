"""The correctness gate: FlashInfer-Bench main's rules plus a stricter layer, judged outside the candidate's process.

`runner` drives one solution over workloads; `judge` runs one workload (inputs, checks, verdict) in this process;
`worker` is the candidate's process; `pool` and `perturb` make every call's inputs; `compare` holds the contest's
rules and `strict` the strict verdict; `scan` and `guards` are the static and runtime tripwires.
"""
from .compare import Check, Tolerance, contest_tolerance  # noqa: F401
from .plan import CallPlan  # noqa: F401
from .runner import GateResult, draw_seed, gate_solution  # noqa: F401
