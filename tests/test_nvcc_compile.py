"""Every CUDA source of every solution compiles for sm_90a with nvcc (registers and spills are printed)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(ROOT.glob("solutions/*/solution/*/*.cu"))
ARCH = "-gencode=arch=compute_90a,code=sm_90a"


def _torch_includes() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [f"-I{p}" for p in include_paths()]


@pytest.mark.parametrize("source", SOURCES, ids=[str(s.relative_to(ROOT / "solutions")) for s in SOURCES])
def test_cuda_source_compiles_for_sm90a(source, tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or in /usr/local/cuda/bin: cannot compile-check CUDA here")
    cmd = [nvcc, ARCH, "-std=c++17", "-O3", "-Xptxas", "-v", "-c", str(source), "-o", str(tmp_path / "k.o"),
           f"-I{source.parent}", *_torch_includes()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"nvcc failed for {source.name}:\n{proc.stderr[-4000:]}"
    report = [l for l in proc.stderr.splitlines() if re.search(r"registers|spill", l)]
    print(f"\n{source.relative_to(ROOT)}:\n" + "\n".join(report[-12:]))
