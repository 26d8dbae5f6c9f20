"""Contest solution packages: `solutions/<dir>/config.toml` plus flat sources, loaded into flashinfer-bench models.

Layout (the contest's): `config.toml` with `[solution]` name/definition/author and `[build]` language,
entry_point, destination_passing_style, binding, source_dir; sources in `solution/<source_dir>` (default
`solution/<language>`), one flat folder, as the contest's packer reads it. Building a solution writes its sources
as a Python package keyed by the solution hash and imports the entry module, as flashinfer-bench's Python
builder does, so sibling modules import each other relatively.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ._fib import BuildSpec, Definition, Solution, SourceFile
from .errors import BadInputError, one_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".c", ".h", ".hpp", ".cc", ".cxx"}
MAX_SOURCE_BYTES = 2 * 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_KEYS = {"solution": {"name", "definition", "author", "description"},
               "build": {"language", "entry_point", "destination_passing_style", "binding", "source_dir",
                         "target_hardware", "dependencies"}}


@dataclass(frozen=True)
class SolutionPackage:
    root: Path          # the folder holding config.toml
    source_dir: Path    # the flat folder of sources
    solution: Solution  # flashinfer-bench model, sources embedded

    @property
    def name(self) -> str:
        return self.solution.name


def _read_config(path: Path) -> dict:
    try:
        config = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise BadInputError(f"{path.parent}: no config.toml") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: malformed TOML ({exc})") from None
    for table, allowed in CONFIG_KEYS.items():
        if not isinstance(config.get(table), dict):
            raise BadInputError(f"{path}: missing [{table}] table")
        unknown = set(config[table]) - allowed
        if unknown:
            raise BadInputError(f"{path}: unknown key(s) in [{table}]: {sorted(unknown)}")
    unknown_tables = set(config) - set(CONFIG_KEYS)
    if unknown_tables:
        raise BadInputError(f"{path}: unknown table(s) {sorted(unknown_tables)}")
    for key in ("name", "definition", "author"):
        if not isinstance(config["solution"].get(key), str) or not config["solution"][key]:
            raise BadInputError(f"{path}: [solution] {key} must be a non-empty string")
    if not SAFE_NAME.match(config["solution"]["name"]):
        raise BadInputError(f"{path}: [solution] name {config['solution']['name']!r} must match {SAFE_NAME.pattern} "
                            "(it names trace and evidence files)")
    return config


def read_sources(source_dir: Path) -> list[SourceFile]:
    """The flat source files of a solution; refuses links, escapes and oversized files."""
    if source_dir.is_symlink() or not source_dir.is_dir():
        raise BadInputError(f"{source_dir}: source folder missing (or a symlink)")
    sources = []
    for path in sorted(source_dir.iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__":
            continue
        if path.is_symlink():
            raise BadInputError(f"{path}: symlinks are not allowed in solution sources")
        if path.is_dir():
            raise BadInputError(f"{path}: solution sources must be flat (the contest packer does not recurse)")
        if path.suffix not in SOURCE_SUFFIXES:
            raise BadInputError(f"{path}: {path.suffix or 'no'} suffix is not a source the contest packs")
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise BadInputError(f"{path}: {path.stat().st_size} bytes is over the {MAX_SOURCE_BYTES} byte limit")
        try:
            sources.append(SourceFile(path=path.name, content=path.read_text()))
        except UnicodeDecodeError:
            raise BadInputError(f"{path}: not UTF-8 text (binaries are not allowed)") from None
    if not sources:
        raise BadInputError(f"{source_dir}: no source files")
    return sources


def load_package(root: str | Path) -> SolutionPackage:
    root = Path(root)
    config = _read_config(root / "config.toml")
    build = config["build"]
    language = build.get("language", "python")
    source_dir = root / "solution" / build.get("source_dir", language)
    if ".." in Path(build.get("source_dir", language)).parts or Path(build.get("source_dir", "x")).is_absolute():
        raise BadInputError(f"{root}/config.toml: source_dir must stay inside {root}/solution")
    sources = read_sources(source_dir)
    entry = build.get("entry_point", "")
    if isinstance(entry, str) and "::" in entry and entry.split("::")[0] not in {s.path for s in sources}:
        raise BadInputError(f"{root}/config.toml: entry_point {entry!r}: {entry.split('::')[0]!r} is not among the "
                            f"sources ({', '.join(s.path for s in sources)})")
    try:
        spec = BuildSpec(
            language=language,
            target_hardware=build.get("target_hardware", ["cuda"]),
            entry_point=build.get("entry_point", ""),
            dependencies=build.get("dependencies", []),
            destination_passing_style=build.get("destination_passing_style", True),
            binding=build.get("binding"),
        )
        solution = Solution(name=config["solution"]["name"], definition=config["solution"]["definition"],
                            author=config["solution"]["author"],
                            description=config["solution"].get("description"), spec=spec, sources=sources)
    except Exception as exc:
        raise BadInputError(f"{root}/config.toml: invalid solution ({one_line(exc)})") from None
    from . import definitions

    if solution.definition not in definitions.names():
        raise BadInputError(f"{root}/config.toml: unknown definition {solution.definition!r}; known: "
                            f"{', '.join(definitions.names())}")
    return SolutionPackage(root=root, source_dir=source_dir, solution=solution)


def discover(root: str | Path | None = None) -> list[SolutionPackage]:
    from .paths import under_root

    root = Path(root) if root else under_root("solutions")
    return [load_package(p.parent) for p in sorted(root.glob("*/config.toml"))]


def _binds(node: ast.stmt, symbol: str) -> bool:
    """Whether a top-level statement binds `symbol` (a def, a class, an assignment, an import, a star import)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == symbol
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(n, ast.Name) and n.id == symbol for t in targets for n in ast.walk(t))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any(a.name == "*" or (a.asname or a.name.split(".")[0]) == symbol for a in node.names)
    return False


def _mentioned(tree: ast.Module) -> set[str]:
    """Every identifier and string constant of a module that could name a module attribute."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.update({node.name, node.asname or ""})
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def _cannot_take(fn: ast.FunctionDef | ast.AsyncFunctionDef, arity: int) -> bool:
    """Whether `fn` cannot be called with `arity` positional arguments (read from its syntax, nothing is run)."""
    args = fn.args
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    kw_required = sum(default is None for default in args.kw_defaults)
    return arity < required or (arity > positional and args.vararg is None) or kw_required > 0


def check_entry(package: SolutionPackage, definition: Definition) -> None:
    """The entry point, checked on the entry file's syntax before anything runs, so that a missing entry function
    or a wrong signature is a one-line error instead of a COMPILE_ERROR on every workload. Only what the syntax
    settles is refused: a decorated, assigned, imported or conditionally defined entry point is left to the build,
    which checks the imported callable again."""
    solution = package.solution
    file, _, symbol = solution.spec.entry_point.partition("::")
    text = next((s.content for s in solution.sources if s.path == file), None)
    if text is None or not file.endswith(".py"):
        return
    try:
        tree = ast.parse(text, filename=file)
    except (SyntaxError, ValueError):
        return  # the build reports it, with the compiler's message
    bound = [node for node in tree.body if _binds(node, symbol)]
    if not bound:
        if symbol not in _mentioned(tree):  # no name, def, import or string anywhere could bind it
            raise BadInputError(f"{package.root}: entry point {solution.spec.entry_point!r}: {file} defines no "
                                f"{symbol!r}")
        return
    fn = bound[-1]
    if len(bound) != 1 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.decorator_list:
        return
    dps = solution.spec.destination_passing_style
    expected = [*definition.inputs, *(definition.outputs if dps else [])]
    if _cannot_take(fn, len(expected)):
        has = ", ".join(a.arg for a in (*fn.args.posonlyargs, *fn.args.args))
        raise BadInputError(f"{package.root}: {'destination-passing' if dps else 'value-returning'} entry "
                            f"{solution.spec.entry_point} must take {len(expected)} positional arguments "
                            f"({', '.join(expected)}), has ({has})")


def source_hash(solution: Solution) -> str:
    return solution.hash()


def cache_root() -> Path:
    return Path(os.environ.get("FIB_SDK_CACHE", Path.home() / ".cache" / "fib-sdk"))


def materialize(solution: Solution, dest: Path) -> Path:
    """Write the sources as an importable package under `dest`; returns the package folder."""
    package = dest / f"fibsol_{solution.hash()[:16]}"
    package.mkdir(parents=True, exist_ok=True)
    for source in solution.sources:
        target = (package / source.path).resolve()
        if package.resolve() not in target.parents:
            raise BadInputError(f"{solution.name}: source path {source.path!r} escapes the build folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text() != source.content:
            target.write_text(source.content)
    return package


def build(solution: Solution, definition: Definition) -> Callable:
    """Import the solution's entry point (its own JIT compilation, if any, happens at import or first call)."""
    if solution.definition != definition.name:
        raise BadInputError(f"{solution.name} solves {solution.definition!r}, not {definition.name!r}")
    if solution.spec.language.value not in ("python", "triton"):
        raise BadInputError(f"{solution.name}: language {solution.spec.language.value!r} is built by the contest's "
                            "TVM-FFI builder; ship CUDA as a Python solution that compiles its own .cu")
    file, symbol = solution.spec.entry_point.split("::")
    if not file.endswith(".py") or file not in {s.path for s in solution.sources}:
        raise BadInputError(f"{solution.name}: entry file {file!r} is not among the Python sources")
    package = materialize(solution, cache_root() / "build")
    if str(package.parent) not in sys.path:
        sys.path.insert(0, str(package.parent))
    module = importlib.import_module(f"{package.name}.{file[:-3].replace('/', '.')}")
    fn = getattr(module, symbol, None)
    if not callable(fn):
        raise BadInputError(f"{solution.name}: entry point {solution.spec.entry_point!r} is not a callable")
    arity = len(definition.inputs) + (len(definition.outputs) if solution.spec.destination_passing_style else 0)
    try:
        inspect.signature(fn).bind(*([None] * arity))
    except TypeError:
        style = "destination-passing" if solution.spec.destination_passing_style else "value-returning"
        raise BadInputError(f"{solution.name}: {style} entry must take {arity} positional arguments, "
                            f"has {inspect.signature(fn)}") from None
    except ValueError:
        pass  # builtins without an inspectable signature
    return fn


def setup_of(fn: Callable) -> Callable | None:
    """The optional `setup(*inputs) -> dict` beside the entry point (flashinfer-bench PR #427): its keyword
    arguments are passed to every call; it may use only shapes and integer inputs (the judge re-draws the floats
    after it)."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    setup = getattr(module, "setup", None)
    return setup if callable(setup) and setup is not fn else None

