"""The judge's memory out of the candidate's reach (Linux).

The worker is the judge's child under the same uid, so by default it may open /proc/<judge>/mem, /proc/<judge>/fd
or use process_vm_writev / ptrace, and rewrite or read what the judge holds: tolerances, the private copies of the
inputs, the verdicts. Every one of those goes through the kernel's ptrace access check, which a same-uid process
passes only while the target is dumpable, and any process passes with CAP_SYS_PTRACE (root has it). So both locks:

  * `judge_protected()`: the judge is non-dumpable while any worker lives (restored after the last one);
  * `drop_ptrace()`, first thing in the worker, before the candidate is imported: no_new_privs, then
    CAP_SYS_PTRACE out of the bounding, ambient, effective, permitted and inheritable sets, so neither the
    candidate nor anything it executes gets it back.

The judge hands CUDA tensors over with legacy CUDA IPC handles and CPU tensors as file descriptors over a socket;
neither needs ptrace access (expandable-segment IPC, which uses pidfd_getfd, would). Elsewhere than Linux both
are no-ops (drop_ptrace says so). Writing files the judge reads later is confined by `sandbox` (Landlock).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
from contextlib import contextmanager

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER = 47, 3
CAP_SYS_PTRACE = 19
_CAPABILITY_VERSION_3 = 0x20080522

_lock = threading.Lock()
_holders = 0
_restore_to: int | None = None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@functools.cache
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _prctl(libc, option: int, arg: int = 0) -> int:
    return libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0))


@contextmanager
def judge_protected():
    """This process non-dumpable while the block runs (nested and threaded uses count; the last one restores it)."""
    global _holders, _restore_to
    libc = _libc()
    with _lock:
        if libc is not None and _holders == 0:
            previous = _prctl(libc, PR_GET_DUMPABLE)
            if previous >= 0 and _prctl(libc, PR_SET_DUMPABLE, 0) == 0:
                _restore_to = previous
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if libc is not None and _holders == 0 and _restore_to is not None:
                _prctl(libc, PR_SET_DUMPABLE, _restore_to)
                _restore_to = None


def drop_ptrace() -> list[str]:
    """In the worker: what could not be done (empty when every step held, or when the process never had it)."""
    libc = _libc()
    if libc is None:
        return ["not Linux: no ptrace restriction"]
    problems = []
    if _prctl(libc, PR_SET_NO_NEW_PRIVS, 1) != 0:
        problems.append(f"no_new_privs: errno {ctypes.get_errno()}")
    # Bounding and ambient sets first: dropping from the bounding set needs CAP_SETPCAP, which stays.
    if _prctl(libc, PR_CAPBSET_DROP, CAP_SYS_PTRACE) != 0 and ctypes.get_errno() not in (1, 22):  # EPERM: not held
        problems.append(f"bounding set: errno {ctypes.get_errno()}")
    libc.prctl(ctypes.c_int(PR_CAP_AMBIENT), ctypes.c_ulong(PR_CAP_AMBIENT_LOWER), ctypes.c_ulong(CAP_SYS_PTRACE),
               ctypes.c_ulong(0), ctypes.c_ulong(0))
    header, data = _CapHeader(_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return problems + [f"capget: errno {ctypes.get_errno()}"]
    word, bit = CAP_SYS_PTRACE // 32, 1 << (CAP_SYS_PTRACE % 32)
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[word], field, getattr(data[word], field) & ~bit)
    if libc.capset(ctypes.byref(header), data) != 0:
        problems.append(f"capset: errno {ctypes.get_errno()}")
    return problems


def dumpable() -> int | None:
    """This process's dumpable flag (1: others of its uid may attach; 0: not), None elsewhere than Linux."""
    libc = _libc()
    return None if libc is None else _prctl(libc, PR_GET_DUMPABLE)
