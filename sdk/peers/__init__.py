"""Peers: what a user would run instead of our kernels, adapted to the same inputs as the contest definitions.

Each peer wraps an optional third-party package. `available()` says whether it can run here (and why not, without
raising); `prepare(inputs)` does every layout conversion, weight permutation and metadata computation once,
outside any timed region, and returns a zero-argument callable that does only the per-call work and returns the
outputs in definition order and dtypes. Peers run on the gate's own inputs, so they pass the same gate or are
reported as failing it.

`uses_cuda_graph` labels how the peer is served: True means the callable is capture-safe (no host sync) and the
serving stack replays it inside a CUDA graph, so a benchmark may time it that way (call it once eagerly first:
DeepGEMM and FlashInfer compile their kernels on the first call). False means it must be timed eagerly.

Wheels (git-ignored `.whl/`), picked for torch 2.11 + CUDA 13 on sm_90 by static ABI checks (shared notes,
hopper-peers.md §2); `fib-sdk env prebuild --check` shows whether they load and pass on the device:
  sgl-deep-gemm 0.1.5.post1 + apache-tvm-ffi 0.1.11   DeepGEMM (paged MQA logits, m-grouped FP8 GEMM; JIT via nvcc)
  sgl-flash-mla 1.0.0                                   FlashMLA, SM90 kernels in its legacy half
  sglang-kernel 0.4.6, trimmed by `python -m sdk.peers.repack`   fast_topk_v2 / fast_topk_transform, FlashMLA
  flashinfer-python 0.6.14                              radix top-k with page-table transform, MLA fa3 (JIT)
  sglang 0.5.16 + vllm 0.26.0, both trimmed             Triton fused_moe_kernel (one .py) + its tuned E=32,N=2048
                                                        H200 config (one .json); triton itself comes with torch
  flashinfer-bench 0.1.2, pydantic 2.14.4 (+ pydantic-core, annotated-types, typing-inspection,
  typing-extensions, docstring-parser)                  not peers: what sdk itself needs on the device
`fib-sdk env wheels` downloads them (pinned in sdk/env/wheels.py); on the device `eval "$(python3 -m sdk env
install)"` installs them offline and `python3 -m sdk env prebuild` compiles their JIT kernels once.
"""
from __future__ import annotations

import builtins
import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

Outputs = tuple[torch.Tensor, ...]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@functools.lru_cache(maxsize=None)
def import_optional(module: str) -> tuple[object | None, str]:
    """(module, "") when importable, else (None, reason). Never raises: extension loaders fail in many ways."""
    try:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return None, f"package providing {module!r} is not installed"
    except (ImportError, ValueError) as exc:
        return None, _first_line(exc)
    try:
        return importlib.import_module(module), ""
    except BaseException as exc:  # noqa: BLE001 - OSError, AssertionError, RuntimeError, SystemExit from loaders
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, f"import {module} failed ({_first_line(exc)})"


def load_file_with_stubs(path: Path | str, name: str, stubs: dict[str, dict[str, object]]) -> ModuleType:
    """Execute one source file of a package that is not installed whole, as the private module `name`.

    `stubs` maps the modules it imports to the few attributes it takes from them (`from pkg.utils import is_cuda`);
    those imports, and only those, are answered from the stubs for this module alone (sys.modules gets no fake
    entries, only `name` itself), every other import is the real one. The file keeps its real path, so tracebacks, inspect and Triton's
    JIT (which reads kernel source) see the original. Raises whatever the file raises (an import it needs that is
    neither stubbed nor installed, a stub without a name it takes: ImportError).
    """
    real_import = builtins.__import__
    made: dict[str, ModuleType] = {}

    def stub(full: str) -> ModuleType:
        if full not in made:
            made[full] = module = ModuleType(full)
            module.__dict__.update(stubs.get(full, {}))
            for child in stubs:  # `import a.b as c` takes b from a
                if child.rpartition(".")[0] == full:
                    setattr(module, child.rpartition(".")[2], stub(child))
        return made[full]

    def scoped_import(mod, globals=None, locals=None, fromlist=(), level=0):
        top = mod.partition(".")[0]
        if level == 0 and mod in stubs:
            if fromlist:
                return stub(mod)
            if top in stubs:
                return stub(top)
            raise ImportError(f"stub {mod!r} imported without its parent {top!r} stubbed")
        return real_import(mod, globals, locals, fromlist, level)

    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = {**vars(builtins), "__import__": scoped_import}
    sys.modules[name] = module  # inspect.getsource (Triton's JIT) finds the module by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def hopper_reason() -> str:
    """Empty when a CUDA sm_90 device is present (all these peers ship SM90 kernels), else why not."""
    try:
        if not torch.cuda.is_available():
            return "no CUDA device"
        major, minor = torch.cuda.get_device_capability()
    except Exception as exc:  # noqa: BLE001
        return f"CUDA query failed ({_first_line(exc)})"
    return "" if (major, minor) == (9, 0) else f"needs sm_90 (Hopper), device is sm_{major}{minor}"


class Peer:
    """One adapter. Subclasses set the class attributes and implement `_prepare`."""

    name: str = ""
    definition: str = ""
    uses_cuda_graph: bool = False
    note: str = ""
    jit_weight: int = 0                # 0 prebuilt kernels; higher = longer compile on the first call (run last)
    requires: tuple[str, ...] = ()     # modules that must import (first failure is the reason)
    pip_names: tuple[str, ...] = ()    # the wheels that provide them, for the reason text

    def available(self) -> tuple[bool, str]:
        try:
            for module in self.requires:
                if importlib.util.find_spec(module.split(".")[0]) is None:
                    return False, f"{module} not importable: install {' + '.join(self.pip_names) or module}"
            if (reason := hopper_reason()):
                return False, reason
            for module in self.requires:
                if import_optional(module)[0] is None:
                    return False, import_optional(module)[1]
            reason = self._extra_reason()
            return (not reason), reason
        except Exception as exc:  # noqa: BLE001 - available() must never raise
            return False, f"availability check failed ({_first_line(exc)})"

    def _extra_reason(self) -> str:
        """Checks after a successful import (e.g. an extension that imports but failed to load its kernels)."""
        return ""

    def module(self, name: str):
        mod, reason = import_optional(name)
        if mod is None:
            raise RuntimeError(f"{self.name}: {reason}")
        return mod

    def prepare(self, inputs: dict[str, object]) -> Callable[[], Outputs]:
        ok, reason = self.available()
        if not ok:
            raise RuntimeError(f"peer {self.name} is not available: {reason}")
        return self._prepare(dict(inputs))

    def _prepare(self, inputs: dict[str, object]) -> Callable[[], Outputs]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<peer {self.name} for {self.definition}>"


def all_peers() -> list[Peer]:
    from . import attention, indexer, moe

    return [*indexer.PEERS, *attention.PEERS, *moe.PEERS]


def peers_for(definition_name: str) -> list[Peer]:
    return [p for p in all_peers() if p.definition == definition_name]
