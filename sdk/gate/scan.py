"""Static scan of a solution's sources, run before it is built or given any GPU time.

Python sources are parsed (AST); C/C++/CUDA sources, and string literals inside Python (load_inline sources), are
matched line by line against patterns. Each hit is a `Finding(rule, path, line, message)`; the gate turns the first
into `RUNTIME_ERROR "static scan: <rule> at <path>:<line>: <message>"` for every workload, without building.

Rules (what a contest solution may not do; see HELPER_COMMON / the contest's anti-hacking policy):
  forbidden-import  the SDK, the contest harness, other kernel libraries (flashinfer, deep_gemm, sgl_kernel, vllm),
                    introspection (inspect, gc, weakref, builtins), foreign code (ctypes, cffi, importlib), threads
                    and processes (threading, multiprocessing, concurrent, asyncio, subprocess, signal), network
  dynamic-code      exec / eval / compile / __import__ / globals() / vars()
  introspection     frames (sys._getframe, f_back, f_locals ...), sys.modules, settrace, __globals__, __subclasses__
  cuda-stream       side streams and graphs: torch.cuda.Stream / ExternalStream / set_stream / stream() /
                    wait_stream / record_stream / CUDAGraph; cudaStreamCreate, cudaLaunchHostFunc, stream pools
  host-thread       std::thread, std::async, pthread_create, torch.jit.fork, torch.futures
  pointer-key       id(), hash(), .data_ptr() (alignment tests `p % n` / `p & m` excepted), storages, ._version,
                    array interfaces: identity is not content, so anything keyed on it is a stale-result cache
  memoize           functools.lru_cache / cache on a function that takes arguments (tensors hash by identity)
  global-state      module-level containers mutated from a function, `global` names written from values derived
                    from a function's arguments or incremented (call counters), attributes stored on module-level
                    objects, mutable default arguments: state kept across calls; C++ static maps/sets
  monkey-patch      assigning / setattr / delattr on anything reached from an imported module (torch.*, time.*),
                    torch global numerics settings (set_float32_matmul_precision, set_default_dtype ...), dlsym
  host-compute      .cpu() / .numpy() / .tolist() of a function argument, .to("cpu"), device="cpu", numpy
  file-access       open() of anything not derived from the package's own __file__, path literals with `..` or
                    absolute, names of the SDK's data (definitions/, workloads/, .safetensors, FIB_DATASET_PATH)
  process           os.system / popen / fork / exec* / spawn* / kill / _exit; system() / popen() / fork() in C
  suspicious-string a string literal naming a forbidden module or attribute (getattr / import obfuscation)
  declared-cache    FIB_DECLARED_CACHE without a module-level fib_cache_clear() to empty it

Declared caches: a module that sets `FIB_DECLARED_CACHE = "<why the cache is legitimate>"` and defines
`fib_cache_clear()` may keep state across calls (global-state and memoize are not reported for it; pointer-key
still is). The bench then times it twice: warm (the usual repeated calls) and cold (fib_cache_clear() before every
call), and reports both (`sdk.bench.measure`).

A Python file that does not parse is skipped: its build fails with COMPILE_ERROR and a clearer message.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

FORBIDDEN_MODULES = {
    "sdk", "flashinfer_bench", "flashinfer", "deep_gemm", "sgl_kernel", "vllm",
    "inspect", "gc", "weakref", "builtins", "importlib", "ctypes", "_ctypes", "cffi",
    "threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "signal", "pty", "mmap",
    "socket", "ssl", "http", "urllib", "urllib3", "requests", "httpx", "torch.multiprocessing",
    "traceback", "torch.overrides", "torch.library", "torch._C",  # stack walks, function modes, op overrides
}
HOST_MODULES = {"numpy"}
DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "vars", "breakpoint"}
ASYNC_CALLS = {"torch.jit.fork", "torch.jit._fork", "torch.futures.Future"}  # work that outlives the call
INTROSPECTION_ATTRS = {"_getframe", "f_back", "f_locals", "f_globals", "f_code", "tb_frame", "gi_frame", "cr_frame",
                       "__globals__", "__builtins__", "__subclasses__", "__closure__", "get_referrers",
                       "get_objects", "settrace", "setprofile", "meta_path", "path_hooks", "addaudithook"}
SYS_ATTRS = {"modules", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks", "addaudithook",
             "_current_frames"}
STREAM_ATTRS = {"Stream", "ExternalStream", "set_stream", "stream", "wait_stream", "record_stream", "CUDAGraph",
                "graph", "make_graphed_callables", "graph_pool_handle"}
POINTER_ATTRS = {"data_ptr", "untyped_storage", "storage", "_cdata", "_version", "__array_interface__",
                 "__cuda_array_interface__"}
POINTER_CALLS = {"id", "hash"}
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "clear", "remove",
            "discard", "appendleft", "__setitem__", "move_to_end"}
MUTABLE_FACTORIES = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter", "WeakKeyDictionary",
                     "WeakValueDictionary", "ChainMap", "SimpleNamespace"}
TORCH_GLOBAL_SETTERS = {"set_float32_matmul_precision", "set_default_dtype", "set_default_device",
                        "set_default_tensor_type", "set_flush_denormal", "use_deterministic_algorithms"}
HOST_METHODS = {"cpu", "numpy", "tolist"}
PROCESS_ATTRS = {"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle",
                 "execlp", "execlpe", "spawnv", "spawnve", "spawnl", "spawnle", "posix_spawn", "posix_spawnp",
                 "kill", "killpg", "_exit", "abort", "getppid"}  # getppid: the judge is the worker's parent
PACKAGE_DEPTH = 3  # solution/python/main.py: three directory levels up is the package's root, and no further
SDK_DATA = re.compile(r"(^|/)(definitions|workloads)/|\.safetensors\b|\.jsonl\b|FIB_DATASET_PATH")
SUSPICIOUS_WORDS = ({m for m in FORBIDDEN_MODULES if "." not in m} | {"_getframe", "f_locals", "f_back", "data_ptr",
                    "perf_counter", "synchronize", "elapsed_time", "ExternalStream", "set_stream", "Stream"})
DECLARED = "FIB_DECLARED_CACHE"
CLEAR = "fib_cache_clear"

# C / C++ / CUDA (and C++ embedded in Python strings), comments stripped first.
NATIVE_PATTERNS = [
    ("cuda-stream", re.compile(r"\bcudaStreamCreate\w*|\bcuStreamCreate\w*|\bcudaLaunchHostFunc\b|"
                               r"\bcudaStreamAddCallback\b|getStreamFromPool|getStreamFromExternal|"
                               r"\bcudaStreamBeginCapture\b|\bcudaGraphLaunch\b"), "side stream / graph"),
    ("host-thread", re.compile(r"std::(thread|jthread|async)\b|\bpthread_create\b"), "host thread"),
    ("global-state", re.compile(r"\bstatic\s+(std::)?(unordered_map|map|unordered_set|set|unordered_multimap)\s*<"),
     "static map/set: state kept across calls"),
    ("monkey-patch", re.compile(r"\bdlsym\b|\bRTLD_NEXT\b|\bLD_PRELOAD\b|\bdlopen\b"), "symbol interposition"),
    ("process", re.compile(r"(?<![\w.])(system|popen|fork|execv|execvp|execl)\s*\("), "process control"),
    ("file-access", re.compile(r"\bfopen\s*\(|std::[io]?fstream\b|\bopen\s*\(\s*\""), "file access"),
]
NATIVE_SUFFIXES = {".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc", ".cxx"}


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.rule} at {self.path}:{self.line}: {self.message}"


def _root_name(node: ast.AST) -> str | None:
    """`torch` for torch.cuda.Event.record, `x` for x[0].y; None for calls and other roots."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _forbidden(module: str) -> str | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in FORBIDDEN_MODULES or prefix in HOST_MODULES:
            return prefix
    return None


def _strip_c_comments(text: str) -> str:
    """Blank out // and /* */ comments, keeping newlines so line numbers stay right."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.DOTALL)


def scan_native(text: str, path: str, first_line: int = 1) -> Iterator[Finding]:
    for offset, line in enumerate(_strip_c_comments(text).splitlines()):
        for rule, pattern, message in NATIVE_PATTERNS:
            if (m := pattern.search(line)):
                yield Finding(rule, path, first_line + offset, f"{message} ({m.group(0).strip()})")


def _is_mutable_value(node: ast.AST) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in MUTABLE_FACTORIES


class _PythonScan(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module):
        self.path = path
        self.findings: list[Finding] = []
        self.imported: dict[str, str] = {}   # names bound by import statements -> the module they name
        self.module_names: set[str] = set()  # names bound at module level otherwise
        self.mutable_globals: set[str] = set()
        # names bound to paths inside the package: directory levels climbed from __file__ to get there
        self.file_names: dict[str, int] = {"__file__": 0}
        self.docstrings: set[int] = set()
        self.functions: list[ast.AST] = []  # enclosing function stack
        self.declared = False
        self.defines_clear = False
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    self.docstrings.add(id(first.value))
        for node in tree.body:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        self.module_names.add(name.id)
                        value = getattr(node, "value", None)
                        if value is not None and _is_mutable_value(value):
                            self.mutable_globals.add(name.id)
                        if value is not None and isinstance(target, ast.Name) and \
                                (up := self._package_path(value)) is not None:
                            self.file_names[name.id] = up
                        if name.id == DECLARED and isinstance(value, ast.Constant) and isinstance(value.value, str) \
                                and value.value.strip():
                            self.declared = True
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.module_names.add(node.name)
                if node.name == CLEAR and not isinstance(node, ast.ClassDef):
                    self.defines_clear = True
        self.tree = tree

    # ---- helpers -------------------------------------------------------------------------------------------------
    def add(self, rule: str, node: ast.AST, message: str) -> None:
        if self.declared and rule in ("global-state", "memoize"):
            return
        self.findings.append(Finding(rule, self.path, getattr(node, "lineno", 0), message))

    def _params(self) -> set[str]:
        names: set[str] = set()
        for fn in self.functions:
            a = fn.args
            names |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        return names

    def _locals(self) -> set[str]:
        """Names assigned (not declared global) in the innermost function, plus its parameters."""
        if not self.functions:
            return set()
        fn = self.functions[-1]
        declared_global = {n for node in ast.walk(fn) if isinstance(node, (ast.Global, ast.Nonlocal)) for n in node.names}
        assigned = {n.id for node in ast.walk(fn) for n in ast.walk(node)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return (assigned | self._params()) - declared_global

    def _is_module_object(self, name: str | None) -> bool:
        return name is not None and bool(self.functions) and name not in self._locals() and \
            (name in self.module_names) and name not in self.imported

    def run(self) -> list[Finding]:
        self.visit(self.tree)
        if self.declared and not self.defines_clear:
            self.findings.append(Finding("declared-cache", self.path, 1,
                                         f"{DECLARED} is set but there is no module-level {CLEAR}() to empty it"))
        return self.findings

    # ---- imports -------------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            self.imported[bound] = alias.name if alias.asname else bound
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level > 1:
            self.add("forbidden-import", node, "relative import above the solution's own package")
        if node.level == 0 and node.module:
            self._check_module(node, node.module)
            for alias in node.names:
                self._check_module(node, f"{node.module}.{alias.name}")
        for alias in node.names:
            self.imported[alias.asname or alias.name] = f"{node.module or '.'}.{alias.name}"
            if node.module == "sys" and alias.name in SYS_ATTRS | INTROSPECTION_ATTRS:
                self.add("introspection", node, f"imports sys.{alias.name}")

    def _check_module(self, node: ast.AST, module: str) -> None:
        hit = _forbidden(module)
        if hit in HOST_MODULES:
            self.add("host-compute", node, f"imports {hit} (host-side computation)")
        elif hit:
            self.add("forbidden-import", node, f"imports {hit}")

    # ---- functions -----------------------------------------------------------------------------------------------
    def _visit_function(self, node) -> None:
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            if _is_mutable_value(default):
                self.add("global-state", default, f"mutable default argument of {node.name}() persists across calls")
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if _dotted(target).split(".")[-1] in ("lru_cache", "cache", "cached_property") and \
                    (node.args.args or node.args.posonlyargs or node.args.kwonlyargs or node.args.vararg):
                self.add("memoize", deco, f"{node.name}() is memoized on its arguments (tensors hash by identity)")
        self.functions.append(node)
        self.generic_visit(node)
        self.functions.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_Global(self, node: ast.Global) -> None:
        fn = self.functions[-1] if self.functions else None
        if fn is None:
            return
        params = self._params()
        for stmt in ast.walk(fn):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} & set(node.names)
                if not names:
                    continue
                value_names = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} if getattr(stmt, "value", None) else set()
                if isinstance(stmt, ast.AugAssign):
                    self.add("global-state", stmt, f"global {min(names)} is updated on every call")
                elif value_names & params:
                    self.add("global-state", stmt, f"global {min(names)} keeps a value derived from the "
                                                   f"arguments of {fn.name}()")

    # ---- stores --------------------------------------------------------------------------------------------------
    def _check_store(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_store(element, node)
            return
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        root = _root_name(target)
        if root in self.imported:
            self.add("monkey-patch", node, f"assigns {_dotted(target) or root + '[...]'} of an imported module")
        elif self._is_module_object(root):
            self.add("global-state", node, f"stores into module-level {root} from {self.functions[-1].name}()")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_store(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_store(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_store(target, node)
        self.generic_visit(node)

    # ---- calls and attributes ------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        attr = func.attr if isinstance(func, ast.Attribute) else None
        if name in DYNAMIC_CALLS:
            self.add("dynamic-code", node, f"calls {name}()")
        if self._resolve(_dotted(func)) in ASYNC_CALLS:
            self.add("host-thread", node, f"{_dotted(func)}() runs work asynchronously, past the call's return")
        if name in ("getattr", "setattr", "delattr") and len(node.args) >= 2 and \
                not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self.add("dynamic-code", node, f"{name}() with an attribute name computed at run time")
        if name in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            self._check_attribute(node.args[1].value, f"{_dotted(node.args[0])}.{node.args[1].value}", node)
        if name in POINTER_CALLS:
            self.add("pointer-key", node, f"{name}() of an object is its identity, not its content")
        if name in ("setattr", "delattr") and node.args:
            root = _root_name(node.args[0])
            if root in self.imported:
                self.add("monkey-patch", node, f"{name}() on {_dotted(node.args[0]) or root}")
            elif self._is_module_object(root):
                self.add("global-state", node, f"{name}() on module-level {root}")
        if name == "open" or _dotted(func) in ("io.open", "os.open", "os.fdopen", "codecs.open"):
            if not node.args or self._package_path(node.args[0]) is None:
                self.add("file-access", node, "opens a file that is not a path inside the package (from its own "
                                              "__file__, constant relative parts only)")
        if attr in TORCH_GLOBAL_SETTERS and self._resolve(_dotted(func)).startswith("torch."):
            self.add("monkey-patch", node, f"changes torch's process-wide numerics ({attr})")
        if attr in HOST_METHODS and isinstance(func.value, ast.Name) and func.value.id in self._params():
            self.add("host-compute", node, f"{func.value.id}.{attr}() moves an argument to the host")
        if attr == "to" or attr == "device" or name == "device" or attr in ("empty", "zeros", "ones", "full", "tensor"):
            values = list(node.args) + [k.value for k in node.keywords if k.arg in (None, "device")]
            if any(isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("cpu")
                   for v in values):
                self.add("host-compute", node, "computes on the CPU (\"cpu\" device)")
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            base = func.value.id
            if base in self.mutable_globals and attr in MUTATORS and self._is_module_object(base):
                self.add("global-state", node, f"{base}.{attr}() mutates a module-level container from "
                                               f"{self.functions[-1].name}()")
            if base == "os" and attr in PROCESS_ATTRS:
                self.add("process", node, f"os.{attr}()")
        self.generic_visit(node)

    def _package_path(self, expr: ast.AST) -> int | None:
        """Directory levels climbed from __file__ if `expr` is a path inside the package, else None: __file__ or a
        name bound to one, then dirname / .parent (at most PACKAGE_DEPTH: the package's root), abspath, resolve,
        Path(), str(), and joins with constant relative parts (no "..", nothing absolute, nothing computed)."""
        if isinstance(expr, ast.Name):
            return self.file_names.get(expr.id)
        if isinstance(expr, ast.Attribute) and expr.attr == "parent":
            up = self._package_path(expr.value)
            return up + 1 if up is not None and up < PACKAGE_DEPTH else None
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
            return self._package_path(expr.left) if _relative_literal(expr.right) else None
        if not isinstance(expr, ast.Call) or not expr.args and not isinstance(expr.func, ast.Attribute):
            return None
        dotted = self._resolve(_dotted(expr.func))
        method = expr.func.attr if isinstance(expr.func, ast.Attribute) else ""
        if method in ("resolve", "absolute") and not expr.args:
            return self._package_path(expr.func.value)
        if method == "joinpath":
            ok = all(_relative_literal(a) for a in expr.args)
            return self._package_path(expr.func.value) if ok else None
        if not expr.args:
            return None
        first = self._package_path(expr.args[0])
        if first is None:
            return None
        if dotted == "os.path.dirname":
            return first + 1 if first < PACKAGE_DEPTH else None
        if dotted in ("os.path.abspath", "os.path.realpath", "os.fspath", "pathlib.Path", "Path", "str") and \
                len(expr.args) == 1:
            return first
        if dotted in ("os.path.join", "pathlib.Path", "Path"):
            return first if all(_relative_literal(a) for a in expr.args[1:]) else None
        return None

    def _resolve(self, dotted: str) -> str:
        """Dotted name with an import alias at its root replaced by the module it names (T.cuda -> torch.cuda)."""
        root, _, rest = dotted.partition(".")
        module = self.imported.get(root)
        return f"{module}.{rest}" if module and rest else module or dotted

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self._alignment_test(node):
            self._check_attribute(node.attr, self._resolve(_dotted(node)), node)
        self.generic_visit(node)

    def _check_attribute(self, attr: str, dotted: str, node: ast.AST) -> None:
        """An attribute reached by `.attr` or by getattr(obj, "attr")."""
        dotted = self._resolve(dotted)
        if dotted.startswith("torch.") and dotted.split(".")[0] in self.imported and (hit := _forbidden(dotted)):
            self.add("forbidden-import", node, f"uses {hit} (function modes, op overrides, internals)")
        if attr == "sys" and dotted.split(".")[0] in self.imported:  # os.sys, torch.sys: the sys module by another name
            self.add("introspection", node, f"uses {dotted}")
        if attr in INTROSPECTION_ATTRS or (dotted.startswith("sys.") and attr in SYS_ATTRS):
            self.add("introspection", node, f"uses {dotted or attr}")
        if attr in STREAM_ATTRS and (dotted.startswith(("torch.", "cuda.")) or attr not in ("stream", "graph")):
            self.add("cuda-stream", node, f"uses {dotted or attr} (side streams / graphs)")
        if attr in POINTER_ATTRS:
            self.add("pointer-key", node, f"uses .{attr} (identity or storage, not content)")

    def _alignment_test(self, node: ast.Attribute) -> bool:
        parent = getattr(node, "_parent", None)
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        outer = getattr(call, "_parent", None) if call is not None else None
        return node.attr == "data_ptr" and isinstance(outer, ast.BinOp) and isinstance(outer.op, (ast.Mod, ast.BitAnd))

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__":
            self.add("introspection", node, "uses __builtins__")
        self.generic_visit(node)

    # ---- string literals -----------------------------------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or id(node) in self.docstrings:
            return
        text = node.value
        if "\n" in text or "__global__" in text:  # an embedded C++/CUDA source (load_inline)
            self.findings.extend(scan_native(text, self.path, node.lineno))
        one_line = "\n" not in text and " " not in text
        if one_line and (".." in PurePosixPath(text).parts or (text.startswith("/") and len(text) > 1)):
            self.add("file-access", node, f"path literal {text[:60]!r} outside the package")
        if SDK_DATA.search(text):
            self.add("file-access", node, f"names the SDK's or dataset's files ({text[:60]!r})")
        if text.strip() in SUSPICIOUS_WORDS or (_forbidden(text.strip()) and re.fullmatch(r"[\w.]+", text.strip())):
            self.add("suspicious-string", node, f"string {text.strip()!r} names a forbidden module or attribute")


def _relative_literal(node: ast.AST) -> bool:
    """A constant path part that stays below where it is joined: relative, no "..", no empty part."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or not node.value:
        return False
    path = PurePosixPath(node.value)
    return not path.is_absolute() and ".." not in path.parts and "\\" not in node.value


def _link_parents(tree: ast.AST) -> None:
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._parent = parent  # type: ignore[attr-defined]


def scan_python(text: str, path: str) -> list[Finding]:
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError):
        return []  # the build reports it (COMPILE_ERROR) with the interpreter's own message
    _link_parents(tree)
    return _PythonScan(path, tree).run()


def scan_sources(sources: Iterable[tuple[str, str]]) -> list[Finding]:
    """Findings over (path, text) pairs, in source order then line order."""
    findings: list[Finding] = []
    for path, text in sources:
        suffix = PurePosixPath(path).suffix
        if suffix == ".py":
            found = scan_python(text, path)
        elif suffix in NATIVE_SUFFIXES:
            found = list(scan_native(text, path))
        else:
            continue
        findings.extend(sorted(set(found), key=lambda f: (f.line, f.rule, f.message)))
    return findings


def scan(solution) -> list[Finding]:
    """Scan a flashinfer-bench Solution (or an `sdk.solutions.SolutionPackage`)."""
    solution = getattr(solution, "solution", solution)
    return scan_sources((s.path, s.content) for s in solution.sources)


def reason(findings: list[Finding]) -> str:
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"static scan: {first}{more}"
