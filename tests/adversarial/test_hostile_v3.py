"""The third round (h3_*): session 24's red team, who fooled the judge-process gate five ways on CPU.

Each package is the attack reduced to its mechanism, on the sparse attention definition, gated with a timing plan
and the static scan off (each also slips past the scan: the scan is a tripwire, these are the defences):
  * h3_off_the_clock, FIB_H3_ATTACK reply_hook / work_in_reply: Connection.send wrapped to forge the records or
    to work after the call; the worker sends with functions bound before the import (sdk.gate.worker._raw_sender);
  * h3_off_the_clock, FIB_H3_ATTACK import_thread: a thread started at import; the worker counts Python threads
    before the import and after the build;
  * h3_off_the_clock, FIB_H3_ATTACK forged_frame: a reply frame written onto the pipe by the solution; every reply
    must echo its request's nonce (sdk.gate.runner.Worker.ask);
  * h3_write_outside: a file written outside the solution's folders (a poisoned .pyc, a forged trace); the worker
    is confined to its own folders (sdk.gate.sandbox, Landlock), where the kernel offers it;
  * h3_escape: a process left behind by fork, setsid, fork; the worker is its subreaper, so the judge kills it
    with the worker's tree.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from sdk.gate import contest_tolerance, gate_solution
from tests.adversarial.support import TIMING, package, tiny_workload


def _gate(name):
    solution = package(name).solution
    (result,) = gate_solution(solution, solution.definition, [tiny_workload(solution.definition)], device="cpu",
                              plan=TIMING, tol=contest_tolerance(solution.definition), scan=False)
    return result


def test_a_wrapped_connection_never_sees_a_reply(tmp_path, monkeypatch):
    monkeypatch.setenv("FIB_H3_ATTACK", "reply_hook")
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))
    result = _gate("h3_off_the_clock")
    assert result.status == "PASSED", result.reason  # it computes honestly
    assert not log.exists(), log.read_text()  # and no record went through its wrapper


def test_work_hidden_in_the_reply_never_runs(monkeypatch):
    monkeypatch.setenv("FIB_H3_ATTACK", "work_in_reply")
    result = _gate("h3_off_the_clock")
    assert result.status == "INCORRECT_NUMERICAL", result.reason


def test_a_reply_the_harness_did_not_send_is_refused(monkeypatch):
    monkeypatch.setenv("FIB_H3_ATTACK", "forged_frame")
    result = _gate("h3_off_the_clock")
    assert result.status == "RUNTIME_ERROR" and "did not send" in result.reason, result.reason


def test_a_thread_started_at_import_is_refused(monkeypatch):
    monkeypatch.setenv("FIB_H3_ATTACK", "import_thread")
    result = _gate("h3_off_the_clock")
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers and /proc are Linux's")
def test_a_process_left_behind_dies_with_the_worker(tmp_path, monkeypatch):
    log = tmp_path / "tell.log"
    monkeypatch.setenv("FIB_TELL_LOG", str(log))
    monkeypatch.setenv("FIB_SDK_SANDBOX_WRITABLE", str(tmp_path))
    _gate("h3_escape")
    (pid,) = map(int, log.read_text().split())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"process {pid}, left behind by the candidate, outlived the gate")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _landlock_missing() -> str:
    """Why a process here could not be confined ("" when it can), asked of a throwaway child."""
    import subprocess
    import sys

    code = ("from sdk.gate import sandbox; import tempfile, pathlib; "
            "print(sandbox.confine([pathlib.Path(tempfile.mkdtemp())]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
