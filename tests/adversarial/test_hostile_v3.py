"""The third round (h3_*): session 24's red team, who fooled the judge-process gate five ways on CPU.

Each package is the attack reduced to its mechanism, on the sparse attention definition, gated with a timing plan
and the static scan off (each also slips past the scan: the scan is a tripwire, these are the defences):
  * h3_reply_hook / h3_work_in_reply: Connection.send wrapped to forge the records or to work after the call; the
    worker sends with functions bound before the import (sdk.gate.worker._raw_sender);
  * h3_import_thread: a thread started at import; the worker counts Python threads before the import and after
    the build;
  * h3_write_outside: a file written outside the solution's folders (a poisoned .pyc, a forged trace); the worker
    is confined to its own folders (sdk.gate.sandbox, Landlock), where the kernel offers it.
"""
from __future__ import annotations

import pytest

from sdk.gate import contest_tolerance, gate_solution
from tests.adversarial.support import TIMING, package, tiny_workload


def _gate(name):
    solution = package(name).solution
    (result,) = gate_solution(solution, solution.definition, [tiny_workload(solution.definition)], device="cpu",
                              plan=TIMING, tol=contest_tolerance(solution.definition), scan=False)
    return result


def test_a_wrapped_connection_never_sees_a_reply(tmp_path, monkeypatch):
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))
    result = _gate("h3_reply_hook")
    assert result.status == "PASSED", result.reason  # it computes honestly
    assert not log.exists(), log.read_text()  # and no record went through its wrapper


def test_work_hidden_in_the_reply_never_runs():
    result = _gate("h3_work_in_reply")
    assert result.status == "INCORRECT_NUMERICAL", result.reason


def test_a_thread_started_at_import_is_refused():
    result = _gate("h3_import_thread")
    assert result.status == "RUNTIME_ERROR" and "thread(s) running after its import" in result.reason, result.reason


def test_a_write_outside_the_solutions_folders_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "outside" / "poison.pyc"
    target.parent.mkdir()
    monkeypatch.setenv("FIB_H3_TARGET", str(target))
    if (why := _landlock_missing()):
        pytest.skip(f"no filesystem confinement here: {why}")
    result = _gate("h3_write_outside")
    assert result.status == "COMPILE_ERROR" and "Permission denied" in result.reason, result.reason
    assert not target.exists()


def _landlock_missing() -> str:
    """Why a process here could not be confined ("" when it can), asked of a throwaway child."""
    import subprocess
    import sys

    code = ("from sdk.gate import sandbox; import tempfile, pathlib; "
            "print(sandbox.confine([pathlib.Path(tempfile.mkdtemp())]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
