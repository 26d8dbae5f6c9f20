"""The wheels a GPU machine needs beside its own torch, how to fetch them here and how to install them there.

Pinned for the H200 machine (torch 2.11.0+cu130, Python 3.12): the peer builds that load against that torch (shared
notes, hopper-peers.md section 2) and what the SDK itself imports (flashinfer-bench's data models and pydantic).
Three are trimmed after download (`sdk.peers.repack`): sglang-kernel (377 MB whole), sglang (14.6 MB; the MoE Triton
peer keeps one kernel file of it) and vLLM (304 MB; the same peer keeps its four-kilobyte tuned configs for this
expert slice). A device call carries at most 64 MiB in all; `mib` records each file's size as downloaded (and
trimmed) here, so the sum is checked without a download (tests/test_env.py) and a real download says when it is over.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEVICE_PYTHON = "3.12"
# The device's glibc (2.39) and every older manylinux tag, spelled out: older pips do not expand them themselves.
DEVICE_PLATFORMS = ("manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64",
                    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
DEFAULT_TARGET = "/tmp/site"
DEFAULT_CACHE = "/tmp/fib-sdk-cache"
CARRY_BUDGET_MIB = 64.0  # what one device call carries, the checkout's ignored .whl/ included


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    why: str
    mib: float  # the file's size here after download (and trim), MiB
    trim: bool = False  # rewrite with the trim sdk.peers.repack.TRIMS names for it

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


WHEELS = (
    Wheel("flashinfer-bench", "0.1.2", "the SDK's data models (installed --no-deps, as here)", 0.14),
    Wheel("pydantic", "2.14.4", "flashinfer-bench's models", 0.47),
    Wheel("pydantic-core", "2.50.5", "pydantic", 2.16),
    Wheel("annotated-types", "0.8.0", "pydantic", 0.01),
    Wheel("typing-inspection", "0.4.5", "pydantic", 0.01),
    Wheel("typing-extensions", "4.16.0", "pydantic", 0.04),
    Wheel("docstring-parser", "0.18.0", "flashinfer-bench", 0.02),
    Wheel("sgl-deep-gemm", "0.1.5.post1", "DeepGEMM peers: paged MQA logits, m-grouped FP8 GEMM (JIT via nvcc)", 4.59),
    Wheel("apache-tvm-ffi", "0.1.11", "sgl-deep-gemm's and FlashInfer's binding", 2.57),
    Wheel("sgl-flash-mla", "1.0.0", "FlashMLA SM90 sparse prefill peer", 9.41),
    Wheel("sglang-kernel", "0.4.6", "fast_topk_v2 / fast_topk_transform, FlashMLA ops", 13.78, trim=True),
    Wheel("flashinfer-python", "0.6.14", "radix top-k with page table, MLA fa3 (JIT)", 13.90),
    Wheel("sglang", "0.5.16", "MoE Triton peer: fused_moe_kernel (kernels/ops/moe/fused_moe_triton_kernels.py only)",
          0.02, trim=True),
    Wheel("vllm", "0.26.0", "MoE Triton peer: the tuned E=32,N=2048 FP8 [128,128] fused_moe configs (JSON only)",
          0.01, trim=True),
)


def select(only: list[str] | None) -> list[Wheel]:
    if not only:
        return list(WHEELS)
    known = {w.name: w for w in WHEELS}
    unknown = [n for n in only if n not in known]
    if unknown:
        from ..errors import BadInputError

        raise BadInputError(f"unknown wheel(s) {unknown}; pinned: {', '.join(known)}")
    return [known[n] for n in only]


def download_command(wheel: Wheel, dest: Path, python: str = DEVICE_PYTHON,
                     platforms: tuple[str, ...] = DEVICE_PLATFORMS) -> list[str]:
    """pip download of one wheel for the device's interpreter (not this one): binary only, no dependencies."""
    abi = "cp" + python.replace(".", "")
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
            "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
            *(arg for platform in platforms for arg in ("--platform", platform)), "--dest", str(dest),
            wheel.requirement]


def _wheel_file(dest: Path, wheel: Wheel) -> Path | None:
    stem = wheel.name.replace("-", "_").lower()
    hits = [p for p in Path(dest).glob("*.whl")
            if p.name.lower().startswith(f"{stem}-{wheel.version}-")]
    return hits[0] if hits else None


def download(dest: Path, wheels: list[Wheel], *, python: str = DEVICE_PYTHON,
             platforms: tuple[str, ...] = DEVICE_PLATFORMS, echo=print) -> list[Path]:
    """Fetch each wheel into `dest` (skipping ones already there), trimming those marked `trim` in place."""
    from ..peers.repack import TRIMS, repack

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for wheel in wheels:
        path = _wheel_file(dest, wheel)
        if path is None:
            staging = dest / ".download"
            staging.mkdir(exist_ok=True)
            subprocess.run(download_command(wheel, staging, python, platforms), check=True,
                           stdout=sys.stderr)  # pip's chatter never on stdout
            fetched = _wheel_file(staging, wheel)
            if fetched is None:
                raise RuntimeError(f"pip download left no {wheel.requirement} wheel in {staging}")
            if wheel.trim:
                trim = TRIMS[wheel.name]
                path = repack(fetched, dest, trim.drop, trim.keep)
            else:
                path = fetched.replace(dest / fetched.name)
            fetched.unlink(missing_ok=True)
        echo(f"{path.name} ({size_text(path.stat().st_size)}): {wheel.why}")
        out.append(path)
    staging = dest / ".download"
    if staging.exists() and not any(staging.iterdir()):
        staging.rmdir()
    total = sum(p.stat().st_size for p in Path(dest).glob("*.whl")) / 2**20
    if total > CARRY_BUDGET_MIB:
        echo(f"warning: {dest} holds {total:.1f} MiB of wheels, over the {CARRY_BUDGET_MIB:.0f} MiB a device call "
             "carries")
    return out


def size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def carried_mib(wheels: tuple[Wheel, ...] | list[Wheel] = WHEELS) -> float:
    """The recorded size of these wheels together (all of them by default), MiB."""
    return sum(w.mib for w in wheels)


def install_command(wheel_files: list[Path], target: Path) -> list[str]:
    """Offline install into a folder of its own: the machine's torch and CUDA stay as they are."""
    return [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
            "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, wheel_files)]


def exports(target: Path, repo: Path, cache: Path) -> list[str]:
    """Shell lines that put the checkout and the installed wheels on the path and the JIT caches in one place."""
    return [f'export PYTHONPATH="{repo}:{target}${{PYTHONPATH:+:$PYTHONPATH}}"',
            f'export PYTHONUNBUFFERED=1 FIB_SDK_CACHE="{cache}" DG_JIT_CACHE_DIR="{cache}/deep_gemm"']


def install(wheels_dir: Path, target: Path) -> list[Path]:
    files = sorted(Path(wheels_dir).glob("*.whl"))
    if files:
        subprocess.run(install_command(files, target), check=True, stdout=sys.stderr)
    return files
