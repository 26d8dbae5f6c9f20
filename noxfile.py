"""Sessions: `nox` (= tests), `lint`, `gate`, `bench`, `repro`, `submit`, `regenerate`.

CPU sessions build a virtualenv with the CPU torch wheel and flashinfer-bench without its 1 GB of JIT
dependencies (see README, "Install"). GPU sessions (`gate`, `bench`, `repro`) run in the current interpreter,
because GPU machines bring their own CUDA build of torch that must not be replaced.
"""
from __future__ import annotations

import os
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
TORCH = os.environ.get("FIB_TORCH_SPEC", "torch==2.13.0")  # the CPU wheel on this project's machines
FLASHINFER_BENCH = "flashinfer-bench==0.1.2"


def install_sdk(session: nox.Session, *extras: str) -> None:
    session.install(TORCH)
    session.install("--no-deps", FLASHINFER_BENCH)  # its data models only; see README "Install"
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def in_place(session: nox.Session, *args: str) -> None:
    """Run the SDK in the current interpreter (GPU machines), with this checkout importable."""
    session.run("python", "-m", "sdk", *args, env={"PYTHONPATH": str(ROOT)}, external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite (GPU tests skip with their reason) incl. the nvcc sm_90a compile check of every .cu."""
    install_sdk(session, "test")
    session.run("pytest", *(session.posargs or ["-q"]))


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "sdk", "tests", "noxfile.py")


@nox.session(venv_backend="none")
def gate(session: nox.Session) -> None:
    """`nox -s gate -- SOLUTION_DIR [fib-sdk gate options]` (default: every solution in solutions/)."""
    targets = session.posargs or [str(p.parent) for p in sorted(ROOT.glob("solutions/*/config.toml"))]
    dirs = [t for t in targets if not t.startswith("-")]
    options = [t for t in targets if t.startswith("-")]
    failed = []
    for solution_dir in dirs:
        try:
            in_place(session, "gate", solution_dir, *options)
        except nox.command.CommandFailed:
            failed.append(solution_dir)
    if failed:
        session.error(f"gate failed for {', '.join(failed)}")


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """`nox -s bench -- [SOLUTION_DIR...] [fib-sdk bench options]` (default: every solution in solutions/)."""
    in_place(session, "bench", *session.posargs)


@nox.session(venv_backend="none")
def repro(session: nox.Session) -> None:
    """Bench all contest workloads of every solution, then render repro/REPORT.md and its plots."""
    in_place(session, "bench", "--tag", "repro", *session.posargs)
    in_place(session, "report", "--latest")


def submission_dirs() -> list[str]:
    """The kernels to submit, one per definition: `submission.toml` at the root (not the contest's config.toml)."""
    import tomllib

    return tomllib.loads((ROOT / "submission.toml").read_text())["submit"]["solutions"]


@nox.session
def submit(session: nox.Session) -> None:
    """Package the kernels named in submission.toml into dist/submission/ from committed H200 gate evidence."""
    args = session.posargs or submission_dirs()
    if "--gate" in args:  # gating needs the GPU machine's own torch
        in_place(session, "submit", *args)
        return
    install_sdk(session)
    session.run("python", "-m", "sdk", "submit", *args)


@nox.session
def regenerate(session: nox.Session) -> None:
    """Agent loop; with no arguments re-render every template-generated solution and fail on byte drift."""
    install_sdk(session)
    session.run("python", "-m", "sdk", "regenerate", *session.posargs)
