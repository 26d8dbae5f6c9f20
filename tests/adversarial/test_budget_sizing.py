"""Budget-sized trials (CallPlan.budget_ms): the call a trial is sized on must not become an unchecked timed call."""
from __future__ import annotations

from sdk.gate import CallPlan, contest_tolerance, gate_solution
from tests.adversarial.support import package, tiny_workload

# A plan BenchConfig / --settings accept: warmup 1, min_iters 1, many iters (so the unsized check probability,
# checks / (warmup + iters - 1) = 3 / 1000, is what call 1 gets), a budget call 1 can sleep past.
PLAN = CallPlan(trials=3, warmup=1, iters=1000, checks=3, budget_ms=20.0, min_iters=1)


def test_a_slow_wrong_sizing_call_is_not_the_trials_only_timed_call():
    name = "budget_sizing_call"
    solution = package(name).solution
    (result,) = gate_solution(solution, solution.definition, [tiny_workload(solution.definition)], device="cpu",
                              plan=PLAN, tol=contest_tolerance(solution.definition))
    timed = [c for c in result.raw.get("calls") or [] if c["timed"]]
    # Every timed call is a call that wrote nothing (odd positions); a correct gate must not pass it.
    assert result.status != "PASSED", (f"passed with {len(timed)} timed call(s), all unwritten, "
                                       f"{result.raw.get('checked')} checked call(s)")
