"""Compile check of a candidate's CUDA sources for Hopper (sm_90a) with nvcc, plus the ptxas resource report.

Each `.cu` is compiled alone (`-c`) with the torch and Python include folders on the path, the way the solution's
JIT build would see them. The ptxas lines (registers, spills, shared memory per kernel) are the only performance
evidence a machine without a GPU can give, and the profiler role receives them as such.
"""
from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]
NVCC_FLAGS = ["-std=c++17", "-O3", "-Xptxas", "-v", "-lineinfo"]
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass
class BuildResult:
    ok: bool
    log: str
    kernels: list[dict] = field(default_factory=list)
    skipped: str | None = None

    def first_error(self) -> str:
        for line in self.log.splitlines():
            if "error" in line.lower():
                return line.strip()[:200]
        return self.log.strip().splitlines()[-1][:200] if self.log.strip() else "unknown build failure"


@functools.lru_cache(maxsize=1)
def include_flags() -> tuple[str, ...]:
    """torch's and Python's include folders, found without importing torch (that import costs seconds)."""
    paths = []
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0]) / "include"
        paths += [root, root / "torch" / "csrc" / "api" / "include"]
    paths.append(Path(sysconfig.get_paths()["include"]))
    flags = [f"-I{p}" for p in paths if p.is_dir()]
    if paths[:1] and not (paths[0] / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():
        # CPU-only torch wheels lack this generated header; on Linux it only sets a Windows export macro.
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    return tuple(flags)


def parse_ptxas(log: str) -> list[dict]:
    kernels, current = [], None
    for line in log.splitlines():
        if m := ENTRY.search(line):
            current = {"kernel": m.group(1), "arch": m.group(2), "registers": None, "spill_bytes": 0,
                       "smem_bytes": 0}
            kernels.append(current)
        elif current is not None and (m := SPILL.search(line)):
            current["spill_bytes"] = int(m.group(1)) + int(m.group(2))
        elif current is not None and (m := USED.search(line)):
            current["registers"] = int(m.group(1))
            current["smem_bytes"] = int(m.group(2) or 0)
    return kernels


def _compile_one(nvcc: str, source: Path, out_dir: Path, timeout_s: float) -> tuple[bool, str]:
    cmd = [nvcc, *ARCH_FLAGS, *NVCC_FLAGS, "-I.", *include_flags(), "-c", source.name,
           "-o", str(Path(out_dir).resolve() / (source.stem + ".o"))]
    try:  # run beside the source so the log names files, not this machine's folders
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=source.parent)
    except subprocess.TimeoutExpired:
        return False, f"$ {' '.join(cmd[:4])} ... {source.name}\nerror: nvcc timed out after {timeout_s:.0f} s\n"
    header = f"$ nvcc {' '.join(ARCH_FLAGS + NVCC_FLAGS)} -c {source.name}\n"
    return proc.returncode == 0, header + proc.stdout + proc.stderr


def compile_check(source_dir: Path, out_dir: Path, *, timeout_s: float = 600.0, jobs: int = 2) -> BuildResult:
    sources = sorted(Path(source_dir).glob("*.cu"))
    if not sources:
        return BuildResult(ok=True, log="", skipped="no .cu sources to compile")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return BuildResult(ok=True, log="", skipped="nvcc not found on PATH: compile check not run")
    out_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda s: _compile_one(nvcc, s, out_dir, timeout_s), sources))
    log = "".join(text for _, text in results)
    return BuildResult(ok=all(ok for ok, _ in results), log=log, kernels=parse_ptxas(log))
