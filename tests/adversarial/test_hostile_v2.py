"""The second round of hostile packages (h2_*, see hostile_v2.py) against the judge-process gate.

Each ran through the old in-process gate and fooled it (the red-team record in hostile_v2.EXPECTED). Here every one
goes through the real gate with a timing plan (the calls the bench makes), static scan on: each is rejected with a
named reason, or, where the cheat was a way of telling checked calls from timed ones, its own tell log shows that
every call took the computing branch (the tell is gone, so nothing is left to cheat on). GPU-only cheats are the
`gpu` tests at the end; on CPU they are plain honest solutions and are shown to be so.
"""
from __future__ import annotations

import pytest

from sdk import workloads
from sdk.gate import contest_tolerance, gate_solution
from tests.adversarial.hostile_v2 import EXPECTED, MOE
from tests.adversarial.support import TIMING, package, tiny_workload

# name -> (status, words the reason must contain)
REJECTED = {
    "h2_sysmodules_checker": ("INCORRECT_NUMERICAL", "matched ratio"),      # the checker it replaced is not ours
    "h2_torch_function_mode": ("INCORRECT_NUMERICAL", "matched ratio"),     # its mode lives in its own process
    "h2_pipe_forgery": ("INCORRECT_NUMERICAL", "matched ratio"),            # the verdict is not sent by the worker
    "h2_stats_median": ("RUNTIME_ERROR", "statistics.median"),
    "h2_json_trace": ("RUNTIME_ERROR", "json.load"),
    "h2_frame_sniff": ("INCORRECT_NUMERICAL", "contains NaN"),              # no gate frame on any call's stack
    "h2_call_counter": ("INCORRECT_NUMERICAL", "negative index"),           # a check falls on a cheating position
    "h2_work_in_reference": ("INCORRECT_NUMERICAL", "negative index"),      # the reference runs elsewhere
    "h2_raw_thread": (None, ""),                                            # a race it always loses, or a new thread
    "h2_gc_checkers": ("RUNTIME_ERROR", "static scan"),
}
NO_TELL = ["h2_content_cache", "h2_nan_sniff", "h2_profiler_sniff", "h2_event_fallback_sidestream"]


def _gate(name, workload=None, plan=TIMING, **kw):
    solution = package(name).solution
    kw.setdefault("tol", contest_tolerance(solution.definition))
    (result,) = gate_solution(solution, solution.definition, [workload or tiny_workload(solution.definition)],
                              device=kw.pop("device", "cpu"), plan=plan, **kw)
    return result


def test_every_h2_package_has_a_verdict_here():
    assert set(REJECTED) | set(NO_TELL) | {"h2_seed0_table", "h2_moe_skip_cold_experts",
                                           "h2_moe_weight_fingerprint"} == set(EXPECTED)


# What the static scan (a first tripwire, not the defence) now refuses in these packages before any build.
SCANNED = {"h2_sysmodules_checker": "introspection", "h2_torch_function_mode": "forbidden-import",
           "h2_stats_median": "introspection", "h2_frame_sniff": "forbidden-import", "h2_pipe_forgery": "introspection",
           "h2_gc_checkers": "forbidden-import"}


@pytest.mark.parametrize("name", sorted(SCANNED))
def test_the_scan_now_refuses_them_too(name):
    result = _gate(name)
    assert result.status == "RUNTIME_ERROR" and result.reason.startswith(f"static scan: {SCANNED[name]}"), result.reason


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_tampering_tells_and_hidden_work_are_rejected(name):
    """Without the scan: the judge process alone rejects each of them."""
    status, words = REJECTED[name]
    result = _gate(name, scan=name == "h2_gc_checkers")
    assert result.status != "PASSED" and not result.strict_passed, result.reason
    if status:
        assert result.status == status and words in result.reason, result.reason


def test_the_checker_is_out_of_reach_even_without_the_scan():
    """h2_gc_checkers reaches the checker table through gc: the scan refuses it; run anyway, it changes a table in
    its own process, while the verdict is computed in the judge's."""
    result = _gate("h2_gc_checkers", scan=False)
    assert result.status == "INCORRECT_NUMERICAL", result.reason


@pytest.mark.parametrize("name", NO_TELL)
def test_no_call_can_be_told_from_another(name, tmp_path, monkeypatch):
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))  # the worker inherits it
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))  # and may write there (sdk.gate.sandbox)
    result = _gate(name, scan=False)  # (the profiler sniffers read torch._C, which the scan refuses)
    branches = log.read_text().split()
    assert result.status == "PASSED" and result.strict_passed, result.reason
    assert len(branches) == TIMING.trials * TIMING.calls_per_trial and set(branches) == {"computed"}, branches


def test_answers_shipped_for_a_seed_match_no_call():
    """h2_seed0_table ships the answers of every input the old gate drew for seed 0, keyed on the first bytes of q.
    A run's seed now comes from the OS (recorded in the trace): none of the judge's draws under it hits the table,
    so every answer is computed. Forced to seed 0, the judge's schedule differs from the one the table was made
    for: q's first bytes still match on the first call, the rest of the inputs do not, and the stored answer fails."""
    import importlib.util

    import torch

    from sdk import definitions
    from sdk.gate.pool import InputPool

    spec = importlib.util.spec_from_file_location("h2_answers", package("h2_seed0_table").source_dir / "answers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    name = package("h2_seed0_table").solution.definition
    result = _gate("h2_seed0_table")
    assert result.status == "PASSED", result.reason
    pool = InputPool(definitions.load(name), tiny_workload(name), result.raw["seed"], torch.device("cpu"), sets=1)
    for _ in range(TIMING.trials * TIMING.calls_per_trial):
        q = pool.private(pool.next_call())["q_index_fp8"]
        assert bytes(q.view(torch.uint8).reshape(-1)[:16].tolist()).hex() not in module.TABLE
    forced = _gate("h2_seed0_table", seed=0)
    assert forced.status == "INCORRECT_NUMERICAL" and forced.reason.startswith("trial 0 call 0"), forced.reason


def _moe(seq_len: int):
    base = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == 1)
    return base.model_copy(update={"uuid": f"moe-t{seq_len}", "axes": {**base.axes, "seq_len": seq_len}})


@pytest.mark.slow
def test_skipping_cold_experts_passes_the_contest_rule_but_not_the_strict_verdict():
    plan = TIMING.model_copy(update={"trials": 1, "warmup": 0, "iters": 2, "checks": 1})
    result = _gate("h2_moe_skip_cold_experts", _moe(12), plan=plan)
    assert result.status == "PASSED", result.reason  # contest parity: the 0.9 matched-ratio rule lets it through
    assert not result.strict_passed and "relative L2" in result.raw["strict"]["reason"], result.raw["strict"]


@pytest.mark.slow
def test_a_weight_fingerprint_cache_never_hits(tmp_path, monkeypatch):
    """h2_moe_weight_fingerprint keeps dequantised expert weights under a fingerprint of their bytes and scales.
    Scales are per-call inputs and one active expert's weights are re-drawn before every call: the cache never
    hits, every call dequantises (its tell log), and the outputs pass. Its tell log is written through an absolute
    path joined onto the package's own, which the scan refuses since session 7 (the same join reached the judge's
    /proc/<pid>/mem): the runtime defence is shown with the scan off."""
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))
    plan = TIMING.model_copy(update={"trials": 1, "warmup": 0, "iters": 3, "checks": 2})
    scanned = _gate("h2_moe_weight_fingerprint", _moe(8), plan=plan)
    assert scanned.reason.startswith("static scan: file-access at main.py:"), scanned.reason
    result = _gate("h2_moe_weight_fingerprint", _moe(8), plan=plan, scan=False)
    assert result.status == "PASSED" and result.strict_passed, result.reason
    assert log.read_text().split() == ["computed"] * 3


# ---- GPU: the cheats that read the profiler or hide work from CUDA events -------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", ["h2_profiler_sniff", "h2_event_fallback_sidestream"])
def test_profiler_state_tells_nothing_on_gpu(name, tmp_path, monkeypatch):
    """The profiler is on for every call of a timed trial, checked or not: the sniff sees one state throughout and a
    call without device work inside it would be rejected."""
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))
    plan = TIMING.model_copy(update={"profile": True, "checks": 4})
    result = _gate(name, device="cuda", plan=plan, scan=False)
    branches = log.read_text().split() if log.exists() else []
    if result.status == "PASSED":
        assert set(branches) == {"computed"}, branches
    else:
        assert "timing" in result.reason or "trial" in result.reason, result.reason


@pytest.mark.gpu
def test_json_trace_squeeze_is_rejected_on_gpu():
    plan = TIMING.model_copy(update={"profile": True})
    result = _gate("h2_json_trace", device="cuda", plan=plan, scan=False)
    assert result.status == "RUNTIME_ERROR" and "json.load" in result.reason, result.reason
