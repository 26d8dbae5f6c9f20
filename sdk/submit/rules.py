"""Contest rules a submission must keep, checked on the files of a solution's source folder.

- No run-time use of flashinfer, deep_gemm or similar kernel libraries (sgl_kernel, vllm): the FAQ forbids calling
  them; their ideas must be re-implemented in the shipped sources.
- No prebuilt binaries (cubin, fatbin, .so, PTX files, or such bytes embedded in a source): only JIT compilation
  from included source is allowed.
- No network: the evaluation machine has none, and a solution that fetches code is not self-contained.
- No import of this SDK: the contest builds each solution alone.

Python is checked on its syntax tree, so comments and docstrings that mention a library are fine; C, C++ and CUDA
files are checked with text patterns after their comments are removed.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInputError
from ..solutions import SolutionPackage

KERNEL_LIBRARIES = ("flashinfer", "deep_gemm", "sgl_kernel", "vllm")
NETWORK_MODULES = ("socket", "urllib", "urllib3", "requests", "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib",
                   "websocket", "websockets", "paramiko", "http.client", "http.server")
NETWORK_COMMANDS = ("curl", "wget", "pip", "pip3")
SPAWN_CALLS = {"run", "call", "check_call", "check_output", "Popen", "system", "popen", "getoutput",
               "getstatusoutput", "spawnl", "spawnlp", "spawnv", "spawnvp", "execl", "execlp", "execv", "execvp"}
LIBRARY_LOADERS = {"CDLL", "PyDLL", "LoadLibrary", "load_library", "dlopen"}
BINARY_SUFFIXES = {".so", ".cubin", ".ptx", ".fatbin", ".o", ".a", ".obj", ".lib", ".dll", ".dylib", ".pyc",
                   ".bin", ".ko"}
BINARY_MAGIC = {b"\x7fELF": "an ELF object (cubin or shared library)", b"\x50\xed\x55\xba": "a CUDA fatbin"}
C_SUFFIXES = {".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc", ".cxx"}
BLOB_CHARS = 4096  # a string constant this long in base64/hex alphabet is an embedded binary, not code

_LIBS = "|".join(KERNEL_LIBRARIES)
_CMDS = "|".join(NETWORK_COMMANDS)
C_PATTERNS = [
    (re.compile(rf'#\s*include\s*[<"]\s*({_LIBS})\b'), "includes {0} headers (no run-time kernel libraries)"),
    (re.compile(rf'\bdlopen\s*\(\s*"[^"]*({_LIBS})'), "loads {0} at run time (no run-time kernel libraries)"),
    (re.compile(r'#\s*include\s*[<"]\s*(sys/socket\.h|netdb\.h|arpa/inet\.h|netinet/[\w.]+|curl/curl\.h)'),
     "includes {0} (no network at run time)"),
    (re.compile(rf'\b(?:system|popen|exec\w*)\s*\(\s*"[^"]*\b({_CMDS})\b'), "runs {0} (no network at run time)"),
    (re.compile(r"(?:0x[0-9a-fA-F]{1,2}\s*,\s*){256,}"), "embeds a {0}... byte array (no prebuilt binaries)"),
]
ESCAPED_MAGIC = re.compile(r"\\x7[fF]ELF|\\177ELF|\\x50\\xed\\x55\\xba", re.IGNORECASE)
PTX_TEXT = (re.compile(r"\.version\s+\d+\.\d+"), re.compile(r"\.target\s+sm_\d+"))
BLOB = re.compile(r"[A-Za-z0-9+/=\s]+")


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def _top(module: str, names: tuple[str, ...]) -> str | None:
    """The entry of `names` that `module` is or lies inside (`urllib.request` -> `urllib`)."""
    for name in names:
        if module == name or module.startswith(name + "."):
            return name
    return None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _call_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _PythonChecker(ast.NodeVisitor):
    def __init__(self, path: str):
        self.path, self.found = path, []

    def flag(self, node: ast.AST, message: str) -> None:
        self.found.append(Violation(self.path, getattr(node, "lineno", 0), message))

    def module(self, node: ast.AST, module: str) -> None:
        if lib := _top(module, KERNEL_LIBRARIES):
            self.flag(node, f"imports {module} ({lib} may not be called at run time; ship the kernel's source)")
        elif _top(module, NETWORK_MODULES):
            self.flag(node, f"imports {module} (no network at run time)")
        elif _top(module, ("sdk",)):
            self.flag(node, f"imports {module} (the contest builds a solution alone: no SDK imports)")

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):  # imports for type checkers never run
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.module(node, node.module)
            for alias in node.names:  # `from http import client`
                if f"{node.module}.{alias.name}" in NETWORK_MODULES:
                    self.module(node, f"{node.module}.{alias.name}")

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node.func)
        args = [*node.args, *(k.value for k in node.keywords)]
        texts = [s for a in args for s in _strings(a)]
        if name in ("import_module", "__import__") and texts:
            self.module(node, texts[0])
        elif name in SPAWN_CALLS:
            for text in texts:
                words = [w.rsplit("/", 1)[-1] for w in text.split()]
                command = next((w for w in words if w in NETWORK_COMMANDS), None)
                if command:
                    self.flag(node, f"runs {command} (no network at run time)")
                    break
        elif name in LIBRARY_LOADERS:
            for text in texts:
                if lib := next((lib for lib in KERNEL_LIBRARIES if lib in text), None):
                    self.flag(node, f"loads {text} ({lib} may not be called at run time)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes) and any(value.startswith(m) for m in BINARY_MAGIC):
            self.flag(node, "embeds a binary object in a bytes literal (no prebuilt binaries)")
        elif isinstance(value, (str, bytes)) and len(value) >= BLOB_CHARS:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if BLOB.fullmatch(text):
                self.flag(node, f"embeds a {len(value)}-character encoded blob (no prebuilt binaries)")


def _strip_c_comments(text: str) -> str:
    """Remove // and /* */ comments, keeping line breaks so line numbers stay right."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def check_text(path: str, text: str) -> list[Violation]:
    """Rule violations in one source file's text (the file name picks the language)."""
    found = []
    suffix = Path(path).suffix
    if suffix == ".py":
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as exc:
            return [Violation(path, exc.lineno or 0, f"does not parse as Python ({exc.msg})")]
        checker = _PythonChecker(path)
        checker.visit(tree)
        found += checker.found
    elif suffix in C_SUFFIXES:
        code = _strip_c_comments(text)
        for pattern, message in C_PATTERNS:
            for match in pattern.finditer(code):
                found.append(Violation(path, _line(code, match.start()), message.format(match.group(1)
                                                                                        if match.groups() else
                                                                                        match.group(0)[:12])))
    if "\x7fELF" in text or ESCAPED_MAGIC.search(text):
        found.append(Violation(path, _line(text, text.find("ELF")), "embeds an ELF/fatbin header (no prebuilt "
                                                                    "binaries)"))
    if all(p.search(text) for p in PTX_TEXT):
        found.append(Violation(path, _line(text, PTX_TEXT[1].search(text).start()),
                               "embeds PTX for a fixed target (ship the CUDA source and JIT-compile it)"))
    return sorted(found, key=lambda v: v.line)


def check_file(path: Path, label: str | None = None) -> list[Violation]:
    label = label or path.name
    if path.suffix in BINARY_SUFFIXES:
        return [Violation(label, 0, f"is a {path.suffix} binary (no prebuilt binaries; JIT-compile from source)")]
    data = path.read_bytes()
    for magic, what in BINARY_MAGIC.items():
        if data.startswith(magic):
            return [Violation(label, 0, f"is {what} (no prebuilt binaries)")]
    if b"\0" in data:
        return [Violation(label, 0, "contains NUL bytes: a binary, not source")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [Violation(label, 0, "is not UTF-8 text: a binary, not source")]
    return check_text(label, text)


def check_package(package: SolutionPackage) -> list[Violation]:
    """Violations in every file of the source folder, including files the packer would skip (a hidden .so that
    the code loads is still a shipped binary); `__pycache__` is local Python bytecode and is never shipped."""
    found = []
    for path in sorted(package.source_dir.iterdir()):
        if path.name == "__pycache__":
            continue
        if path.is_dir():
            found += [Violation(f"{path.name}/{p.relative_to(path)}", 0, "lies in a subfolder (sources are flat)")
                      for p in sorted(path.rglob("*")) if p.is_file()]
            continue
        found += check_file(path)
    return found


def enforce(package: SolutionPackage) -> None:
    found = check_package(package)
    if found:
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        raise BadInputError(f"{package.name}: breaks the contest rules: {found[0]}{more}")
