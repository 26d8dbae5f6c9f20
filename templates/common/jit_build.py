"""JIT build of this solution's CUDA sources with explicit -gencode flags, cached by source hash.

Shipped inside every CUDA solution (the contest builds solutions alone, so it cannot import the SDK).
sm_90a on Hopper (wgmma/setmaxnreg need the `a` target), sm_100a on Blackwell, plain sm_XY elsewhere.
"""
import hashlib
import os
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def arch_flags():
    major, minor = torch.cuda.get_device_capability()
    suffix = "a" if major in (9, 10) else ""
    return [f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}"]


def load_extension(name, sources, extra_cuda_cflags=()):
    """Compile `sources` (files beside this one) into a torch extension; reuse an identical earlier build."""
    flags = ["-O3", "-std=c++17", "-lineinfo", *arch_flags(), *extra_cuda_cflags]
    digest = hashlib.sha256()
    for path in sorted(HERE.iterdir()):
        if path.suffix in (".cu", ".cuh", ".cpp", ".h"):
            digest.update(path.name.encode() + path.read_bytes())
    digest.update(" ".join(flags).encode())
    tag = f"{name}_{digest.hexdigest()[:16]}"
    cache = Path(os.environ.get("FIB_SDK_CACHE", Path.home() / ".cache" / "fib-sdk")) / "jit" / tag
    cache.mkdir(parents=True, exist_ok=True)
    from torch.utils.cpp_extension import load

    return load(name=tag, sources=[str(HERE / s) for s in sources], extra_cuda_cflags=flags,
                extra_cflags=["-O3", "-std=c++17"], build_directory=str(cache), verbose=False)
