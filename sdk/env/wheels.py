"""The wheels a GPU machine needs beside its own torch, how to fetch them here and how to install them there.

Pinned for the H200 machine (torch 2.11.0+cu130, Python 3.12): the peer builds that load against that torch (shared
notes, hopper-peers.md section 2) and what the SDK itself imports (flashinfer-bench's data models and pydantic).
sglang-kernel is trimmed after download (`sdk.peers.repack`): whole, it is 377 MB, over what a device call carries.
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


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    why: str
    trim: bool = False  # rewrite without the members sdk.peers.repack drops

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


WHEELS = (
    Wheel("flashinfer-bench", "0.1.2", "the SDK's data models (installed --no-deps, as here)"),
    Wheel("pydantic", "2.14.4", "flashinfer-bench's models"),
    Wheel("pydantic-core", "2.50.5", "pydantic"),
    Wheel("annotated-types", "0.8.0", "pydantic"),
    Wheel("typing-inspection", "0.4.5", "pydantic"),
    Wheel("typing-extensions", "4.16.0", "pydantic"),
    Wheel("docstring-parser", "0.18.0", "flashinfer-bench"),
    Wheel("sgl-deep-gemm", "0.1.5.post1", "DeepGEMM peers: paged MQA logits, m-grouped FP8 GEMM (JIT via nvcc)"),
    Wheel("apache-tvm-ffi", "0.1.11", "sgl-deep-gemm's and FlashInfer's binding"),
    Wheel("sgl-flash-mla", "1.0.0", "FlashMLA SM90 sparse prefill peer"),
    Wheel("sglang-kernel", "0.4.6", "fast_topk_v2 / fast_topk_transform, FlashMLA ops", trim=True),
    Wheel("flashinfer-python", "0.6.14", "radix top-k with page table, MLA fa3 (JIT)"),
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
    from ..peers.repack import SGLANG_KERNEL_DROP, repack

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
            path = repack(fetched, dest, SGLANG_KERNEL_DROP) if wheel.trim else fetched.replace(dest / fetched.name)
            fetched.unlink(missing_ok=True)
        echo(f"{path.name} ({path.stat().st_size / 2**20:.1f} MiB): {wheel.why}")
        out.append(path)
    staging = dest / ".download"
    if staging.exists() and not any(staging.iterdir()):
        staging.rmdir()
    return out


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
