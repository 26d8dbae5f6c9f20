"""The candidate's filesystem writes confined to its own folders (Linux Landlock, kernel 5.13 or later).

The worker runs as the judge's user, so without this it could write anything that user can: a poisoned `.pyc`
beside the SDK's sources (the next gate run then loads it as the judge), a module in the repository root, the
traces and results files the judge writes, another solution's cached build. `confine()`, called in the worker
after the judge's ptrace lock and before the candidate is imported, lets the process and everything it starts
write only below:

  * `home`: this solution's own cache (`<FIB_SDK_CACHE>/solutions/<source hash>`: its materialised package, its
    JIT builds, Triton / Inductor / CUDA caches), so one solution cannot rewrite another's build;
  * a private temporary folder (TMPDIR, `tempfile`: compiler scratch files, the profiler's trace export);
  * /dev (the GPU's device files, /dev/shm, /dev/null);
  * what the judge's environment names in FIB_SDK_SANDBOX_WRITABLE (the tests' tell logs).

Reading and executing stay unrestricted. Files opened before `confine()` (the pipe to the judge, the captured
stdout) stay writable. Where Landlock is missing (another OS, an old kernel, a container that filters the
syscalls) or FIB_SDK_SANDBOX=0, nothing is confined and `confine()` says why; the gate records it beside the
ptrace lock's state.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # syscall numbers, the same on x86-64 and arm64 (generic)
_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Every write-like access of each ABI version (execute, read file, read dir and, ABI 5, device ioctl: not handled).
_WRITE_FILE, _REMOVE_DIR, _REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_MAKE = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14


def _handled(abi: int) -> int:
    return _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE | (_REFER if abi >= 2 else 0) | \
        (_TRUNCATE if abi >= 3 else 0)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def home_for(cache_root: Path, source_hash: str) -> Path:
    return Path(cache_root) / "solutions" / source_hash[:16]


def extra_writable() -> list[Path]:
    """Folders the judge's own environment adds (FIB_SDK_SANDBOX_WRITABLE, os.pathsep-separated; tests use it)."""
    return [Path(p) for p in os.environ.get("FIB_SDK_SANDBOX_WRITABLE", "").split(os.pathsep) if p]


def prepare(home: Path) -> Path:
    """Point every cache a build may write at `home`, and temporary files at this process's own folder in it,
    `tmp-<pid>` (those of workers that are gone are removed: a killed worker cannot clean up after itself)."""
    home.mkdir(parents=True, exist_ok=True)
    for old in home.glob("tmp-*"):
        if not _alive(old.name[4:]):
            shutil.rmtree(old, ignore_errors=True)
    scratch = home / f"tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)  # a reused pid's leftovers
    scratch.mkdir(mode=0o700)
    os.environ["FIB_SDK_CACHE"] = str(home)
    for name, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                      ("CUDA_CACHE_PATH", "nv"), ("TORCH_EXTENSIONS_DIR", "torch_extensions")):
        os.environ[name] = str(home / sub)
    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = str(scratch)
    tempfile.tempdir = str(scratch)
    return scratch


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, OSError):  # not a pid of ours, or alive under another user
        return True
    return True


def confine(writable: list[Path]) -> str:
    """Restrict this process (and its future children) to writing below `writable`; "" when done, else why not."""
    if os.environ.get("FIB_SDK_SANDBOX", "1") == "0":
        return "filesystem confinement off (FIB_SDK_SANDBOX=0)"
    if not sys.platform.startswith("linux"):
        return f"filesystem confinement unavailable on {sys.platform}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_RULESET_VERSION))
    if abi < 1:
        return f"filesystem confinement unavailable (Landlock: {os.strerror(ctypes.get_errno())})"
    handled = _handled(abi)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr, its first field only (size-extensible)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"filesystem confinement unavailable (Landlock ruleset: {os.strerror(ctypes.get_errno())})"
    try:
        for folder in writable:
            fd = os.open(folder, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
            try:
                rule = _PathBeneath(handled, fd)
                if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return f"filesystem confinement failed (rule for {folder}: {os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"filesystem confinement failed ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return ""
