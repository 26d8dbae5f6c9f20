"""Sessions: `nox` (= tests), `lint`, `gate`, `bench`, `repro`, `submit`, `regenerate`.

`tests`, `submit` and `regenerate` need the same things, so they share one environment, `.nox/sdk` (CPU torch,
flashinfer-bench without its 1 GB of JIT dependencies, this checkout installed editable with its `test` extra; see
README, "Install"). It is built by the first of them and reused until pyproject.toml or the pins below change;
delete the folder to rebuild it. `lint` has its own small environment (ruff only).

GPU sessions (`gate`, `bench`, `repro`) run in the `python` on PATH, because GPU machines bring their own CUDA build
of torch that must not be replaced; where that Python lacks the SDK's dependencies (a fresh CPU machine), they run
in the shared environment instead and say so.

Every session passes its arguments after `--` to the command unchanged.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "virtualenv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
TORCH = os.environ.get("FIB_TORCH_SPEC", "torch==2.13.0")
FLASHINFER_BENCH = "flashinfer-bench==0.1.2"
SHARED_ENV = Path(os.environ.get("FIB_SDK_NOX_ENV", ROOT / ".nox" / "sdk"))
SHARED_EXTRAS = "test,agent"  # agent: the real-litellm HTTP and MCP tests run in CI
STAMP = "fib-sdk-installed.txt"
# what `python -m sdk` imports; a Python without these cannot run the SDK in place
SDK_IMPORTS = "import click, jinja2, tabulate, pydantic, safetensors, torch, flashinfer_bench.data"


def torch_index() -> str | None:
    """Where torch comes from: FIB_TORCH_INDEX when set (e.g. a CPU wheel index), else pip's configured sources."""
    return os.environ.get("FIB_TORCH_INDEX") or None


def env_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def install_plan() -> list[list[str]]:
    """The pip install commands of the shared environment, in order."""
    index = torch_index()
    return [["install", TORCH, *(["--index-url", index] if index else [])],
            ["install", "-e", f"{ROOT}[{SHARED_EXTRAS}]"],
            # its data models only (README, "Install"); last, so that pip has no later install to warn in about
            # the JIT dependencies it leaves out
            ["install", "--no-deps", FLASHINFER_BENCH]]


def plan_digest() -> str:
    """What the environment was built from (not where torch came from: a satisfied pin is not reinstalled)."""
    text = "\n".join([TORCH, FLASHINFER_BENCH, SHARED_EXTRAS, (ROOT / "pyproject.toml").read_text()])
    return hashlib.sha256(text.encode()).hexdigest()


def sdk_python(session: nox.Session) -> str:
    """The shared environment's Python, created and installed on first use (and after pyproject.toml changes)."""
    python = env_python(SHARED_ENV)
    stamp, digest = SHARED_ENV / STAMP, plan_digest()
    if python.exists() and stamp.is_file() and stamp.read_text().strip() == digest:
        session.log(f"reusing the shared SDK environment {SHARED_ENV}")
        return str(python)
    if not python.exists():
        session.log(f"creating the shared SDK environment {SHARED_ENV} (about 1 GB, mostly the CPU torch wheel)")
        session.run(sys.executable, "-m", "virtualenv", "--quiet", str(SHARED_ENV), external=True)
    stamp.unlink(missing_ok=True)  # an interrupted install is redone next time
    for step in install_plan():
        session.run(str(python), "-m", "pip", *step, external=True)
    stamp.write_text(digest + "\n")
    return str(python)


def in_place_python(session: nox.Session) -> str:
    """`python` on PATH when it can run the SDK (a GPU machine's own torch), else the shared CPU environment."""
    probe = subprocess.run(["python", "-c", SDK_IMPORTS], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    if probe.returncode == 0:
        return "python"
    missing = (probe.stderr.strip().splitlines() or ["python not found"])[-1]
    session.log(f"`python` on PATH cannot run the SDK ({missing}); using the shared CPU environment {SHARED_ENV}")
    return sdk_python(session)


def run_sdk(session: nox.Session, python: str, *args: str) -> None:
    session.run(python, "-m", "sdk", *args, env={"PYTHONPATH": str(ROOT)}, external=True)


# Test processes of `nox -s tests` (pytest-xdist): two fit the 2-core, 24 GB CI machine; 1 runs the suite serially.
TEST_WORKERS = os.environ.get("FIB_TEST_WORKERS", "2")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests skip with their reason) incl. the nvcc sm_90a compile check of every .cu."""
    workers = [] if TEST_WORKERS == "1" else ["-n", TEST_WORKERS, "--dist", "loadgroup"]
    session.run(sdk_python(session), "-m", "pytest", *(session.posargs or ["-q", *workers]), external=True)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", *(session.posargs or ["sdk", "tests", "noxfile.py"]))


@nox.session(venv_backend="none")
def gate(session: nox.Session) -> None:
    """`nox -s gate -- SOLUTION_DIR [fib-sdk gate options]`; with no arguments, every solution in solutions/."""
    python = in_place_python(session)
    if session.posargs:
        run_sdk(session, python, "gate", *session.posargs)
        return
    failed = []
    for config in sorted(ROOT.glob("solutions/*/config.toml")):
        try:
            run_sdk(session, python, "gate", str(config.parent))
        except nox.command.CommandFailed:
            failed.append(config.parent.name)
    if failed:
        session.error(f"gate failed for {', '.join(failed)}")


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """`nox -s bench -- [SOLUTION_DIR...] [fib-sdk bench options]` (default: every solution in solutions/)."""
    run_sdk(session, in_place_python(session), "bench", *session.posargs)


@nox.session(venv_backend="none")
def repro(session: nox.Session) -> None:
    """Bench all contest workloads of every solution (arguments go to bench; `--definition moe` benches one
    definition, into its own `...-repro-moe.json`), then render repro/REPORT.md from the newest repro results file
    of each definition (`newest_repro_files`): runs of different sessions each keep their definition's newest."""
    python = in_place_python(session)
    run_sdk(session, python, "bench", "--tag", "repro", "--settings", str(ROOT / "repro" / "settings.toml"),
            *session.posargs)
    files = sorted((ROOT / "repro" / "results").glob("*-repro*.json"))
    if not files:  # bench wrote elsewhere (--out): render that folder's files with `fib-sdk report FILE ...`
        session.log("no repro results file in repro/results/: REPORT.md not rendered")
        return
    run_sdk(session, python, "report", *[str(f) for f in newest_repro_files(files)])


def newest_repro_files(files: list[Path]) -> list[Path]:
    """`<gpu>-<yyyymmdd>-repro[-<definition>].json`: the newest file of each definition. A whole-run file (no
    definition in its name) is used alone when no per-definition file is newer, and left out otherwise: the report
    takes each definition's rows from one file."""
    newest: dict[str, tuple[str, Path]] = {}  # definition ("" for a whole run) -> (day, file)
    for day, kind, f in sorted((f.stem.partition("-repro")[0].rsplit("-", 1)[-1],
                                f.stem.partition("-repro")[2].lstrip("-"), f) for f in files):
        newest[kind] = (day, f)  # sorted by day: the last one of a definition is its newest
    whole = newest.pop("", None)
    if whole is not None and all(day <= whole[0] for day, _ in newest.values()):
        return [whole[1]]
    return sorted(f for _, f in newest.values())


@nox.session(venv_backend="none")
def submit(session: nox.Session) -> None:
    """`fib-sdk submit` (default: the kernels of submission.toml) from the committed H200 gate evidence."""
    python = in_place_python(session) if "--gate" in session.posargs else sdk_python(session)
    run_sdk(session, python, "submit", *session.posargs)


@nox.session(venv_backend="none")
def regenerate(session: nox.Session) -> None:
    """Agent loop; with no arguments re-render every template-generated solution and fail on byte drift."""
    run_sdk(session, sdk_python(session), "regenerate", *session.posargs)
