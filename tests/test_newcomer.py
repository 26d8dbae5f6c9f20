"""A newcomer's first hour, in pieces that CI can run (a fresh venv from the README's command is too slow for CI):
the README's first block and command list, the nox sessions (one shared environment, arguments passed through
unchanged, a fresh machine's `nox -s gate`), and the agent extra's litellm pin."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sdk.cli import main
from tests.helpers import noxfile_module

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


NOXFILE = noxfile_module()


class FakeSession:
    """What the sessions call on nox's Session, recorded; `virtualenv` creates a stand-in Python."""

    def __init__(self, posargs=()):
        self.posargs, self.calls, self.logs = list(posargs), [], []

    def run(self, *args, **kwargs):
        args = [str(a) for a in args]
        self.calls.append(args)
        if args[1:3] == ["-m", "virtualenv"]:
            python = Path(args[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")

    def install(self, *args):
        self.calls.append(["install", *args])

    def log(self, message):
        self.logs.append(message)

    def error(self, message):
        raise RuntimeError(message)


@pytest.fixture
def nox_env(tmp_path, monkeypatch):
    """The noxfile, with its shared environment in a temp folder and no DNS lookup for the torch index."""
    monkeypatch.setattr(NOXFILE, "SHARED_ENV", tmp_path / "sdk-env")
    monkeypatch.setenv("FIB_TORCH_INDEX", "")
    return NOXFILE


# ---- README -------------------------------------------------------------------------------------------------------

def first_block(text: str) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_readme_first_block_is_install_nox_then_the_two_commands(nox_env):
    assert first_block(README) == ["python -m pip install nox", "nox -s tests", "nox -s submit"]
    for session in ("tests", "submit"):
        assert callable(getattr(nox_env, session))
    intro = README.split("```bash", 2)[1].split("## Install")[0]
    for fact in (".nox/sdk/", "GB", "share"):  # where, how big, one environment
        assert fact in intro, fact
    assert README.index("python -m pip install nox") < README.index("nox -s tests")


def test_readme_lists_every_command_and_every_command_exists():
    commands = set(main.list_commands(None))
    listed = set(re.findall(r"^fib-sdk (\w+)", README.split("## Commands")[1].split("###")[0], re.M))
    assert listed == commands


def test_readme_has_the_sections_the_help_texts_point_to():
    bench = main.get_command(None, "bench")
    remote = next(p for p in bench.params if p.name == "remote").help
    section = re.search(r"README, '([^']+)'", remote).group(1)
    assert f"### {section}" in README and "modal token new" in README
    assert "### Errors and exit status" in README
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 70 |"):
        assert code in README


# ---- nox: one environment, arguments unchanged ------------------------------------------------------------------

def test_tests_submit_and_regenerate_share_one_environment_built_once(nox_env, tmp_path):
    ran = {}
    for name in ("tests", "submit", "regenerate"):
        session = FakeSession()
        getattr(nox_env, name)(session)
        ran[name] = session.calls
    builds = [c for calls in ran.values() for c in calls if c[1:3] == ["-m", "virtualenv"]]
    torch_installs = [c for calls in ran.values() for c in calls if "install" in c and nox_env.TORCH in c]
    assert len(builds) == 1 and len(torch_installs) == 1  # built by the first session, reused by the others
    python = str(tmp_path / "sdk-env" / "bin" / "python")
    assert {calls[-1][0] for calls in ran.values()} == {python}
    assert ran["tests"][-1][1:3] == ["-m", "pytest"]
    assert ran["submit"][-1][1:4] == ["-m", "sdk", "submit"]
    # a change to pyproject.toml's digest rebuilds the installs (not the venv)
    (tmp_path / "sdk-env" / nox_env.STAMP).write_text("stale\n")
    session = FakeSession()
    nox_env.tests(session)
    assert [c for c in session.calls if nox_env.TORCH in c] and not [c for c in session.calls if "virtualenv" in c]


ARGS = ["solutions/moe_torch_baseline", "--workloads", "74d7ff04", "--trials", "1", "--json"]


@pytest.mark.parametrize("name,command", [("gate", ["gate"]), ("bench", ["bench"]), ("submit", ["submit"]),
                                          ("regenerate", ["regenerate"]), ("tests", ["pytest"]),
                                          ("repro", ["bench", "--tag", "repro", "--settings", "{settings}"])])
def test_session_arguments_reach_the_command_unchanged(nox_env, monkeypatch, name, command):
    command = [str(nox_env.ROOT / "repro" / "settings.toml") if c == "{settings}" else c for c in command]
    monkeypatch.setattr(nox_env, "in_place_python", lambda session: "python")
    session = FakeSession(ARGS)
    getattr(nox_env, name)(session)
    runs = [c for c in session.calls if c[1:2] == ["-m"] and c[2] in ("sdk", "pytest")]
    first = runs[0]
    tail = first[first.index("-m") + 2:]
    if command == ["pytest"]:
        assert tail == ARGS
    else:
        assert tail == command + ARGS, tail


def test_lint_passes_arguments_unchanged(nox_env):
    session = FakeSession(["sdk/cli.py", "--select", "F"])
    nox_env.lint(session)
    assert session.calls[-1] == ["ruff", "check", "sdk/cli.py", "--select", "F"]


def test_gate_without_arguments_gates_every_solution(nox_env, monkeypatch):
    monkeypatch.setattr(nox_env, "in_place_python", lambda session: "python")
    session = FakeSession()
    nox_env.gate(session)
    gated = [c[4] for c in session.calls if c[1:4] == ["-m", "sdk", "gate"]]
    assert gated == [str(p.parent) for p in sorted(ROOT.glob("solutions/*/config.toml"))]


def test_gate_on_a_fresh_machine_runs_in_the_shared_environment(nox_env, monkeypatch, tmp_path):
    """The `python` on PATH lacks torch: instead of a ModuleNotFoundError traceback, the shared env runs it."""
    def no_torch(cmd, **kwargs):
        assert cmd[:2] == ["python", "-c"] and "import" in cmd[2]
        return subprocess.CompletedProcess(cmd, 1, "", "ModuleNotFoundError: No module named 'torch'\n")
    monkeypatch.setattr(nox_env.subprocess, "run", no_torch)
    session = FakeSession(["solutions/moe_torch_baseline"])
    nox_env.gate(session)
    assert session.calls[-1][0] == str(tmp_path / "sdk-env" / "bin" / "python")
    assert any("No module named 'torch'" in line and "shared CPU environment" in line for line in session.logs)


def test_in_place_python_is_kept_when_it_can_run_the_sdk(nox_env, monkeypatch):
    monkeypatch.setattr(nox_env.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", ""))
    session = FakeSession(["--gate"])
    nox_env.submit(session)
    assert session.calls == [["python", "-m", "sdk", "submit", "--gate"]]  # a GPU machine keeps its own torch


def test_the_probe_imports_what_the_sdk_imports(nox_env):
    probed = set(re.findall(r"[\w.]+", nox_env.SDK_IMPORTS.replace("import", "")))
    declared = {re.split(r"[<>=!;\[ ]", d)[0].replace("-", "_")
                for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert {"click", "jinja2", "tabulate", "pydantic", "safetensors", "torch"} <= probed
    assert {"click", "jinja2", "tabulate", "pydantic", "safetensors", "torch"} <= declared
    assert "flashinfer_bench.data" in probed


# ---- the agent extra's litellm ------------------------------------------------------------------------------------

# Releases that must never be installable through the agent extra:
#  - 1.82.7 and 1.82.8: published with a credential stealer (March 2026), pulled;
#  - 1.107.0: a compromised release, pulled;
#  - 1.81.16 .. 1.83.6: CVE-2026-42208 (proxy API-key SQL injection), fixed in 1.83.7;
#  - 1.74.2 .. 1.83.6: CVE-2026-42271 (proxy MCP test endpoints run commands), fixed in 1.83.7.
KNOWN_BAD = [Version("1.82.7"), Version("1.82.8"), Version("1.107.0")]
BAD_RANGES = [(Version("1.81.16"), Version("1.83.7")), (Version("1.74.2"), Version("1.83.7"))]  # [first, fixed)


def candidates_in(first: Version, fixed: Version) -> list[Version]:
    """Every release-like version from `first` up to (not including) `fixed`: patch numbers up to 40, with and
    without .post1 / rc1 / .dev1 suffixes, so that a range specifier cannot slip between listed releases."""
    out = []
    for minor in range(first.minor, fixed.minor + 1):
        for patch in range(0, 41):
            for suffix in ("", ".post1", "rc1", ".dev1"):
                version = Version(f"{first.major}.{minor}.{patch}{suffix}")
                if first <= version < fixed:
                    out.append(version)
    return out


def admitted_bad(spec: SpecifierSet) -> list[Version]:
    pool = KNOWN_BAD + [v for first, fixed in BAD_RANGES for v in candidates_in(first, fixed)]
    return sorted(set(spec.filter(pool, prereleases=True)))


def agent_requirement() -> Requirement:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["agent"]
    (litellm,) = [Requirement(r) for r in extras if Requirement(r).name == "litellm"]
    return litellm


def test_the_check_catches_the_ranges_it_is_meant_to_catch():
    assert Version("1.83.0") in admitted_bad(SpecifierSet(">=1.83,!=1.82.7,!=1.82.8"))  # the old range
    assert Version("1.107.0") in admitted_bad(SpecifierSet(">=1.83.7"))
    assert Version("1.81.16") in admitted_bad(SpecifierSet("<1.82"))
    assert admitted_bad(SpecifierSet("==1.83.7")) == []


def test_agent_extra_admits_no_known_bad_litellm():
    requirement = agent_requirement()
    assert admitted_bad(requirement.specifier) == []
    (only,) = list(requirement.specifier)
    assert only.operator == "==" and "*" not in only.version  # one exact release, not a range
    assert Version(only.version) >= Version("1.83.7")


def test_hashed_requirements_pin_the_same_litellm():
    text = (ROOT / "requirements" / "litellm.txt").read_text()
    logical = re.sub(r"\\\n\s*", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    (line,) = [l for l in logical.splitlines() if l.strip()]
    requirement, *options = line.split(" --hash=")
    assert Requirement(requirement.strip()).specifier == agent_requirement().specifier
    assert options and all(re.fullmatch(r"sha256:[0-9a-f]{64}\s*", o) for o in options), options


# ---- skip reasons name what a user has ----------------------------------------------------------------------------

def test_gpu_skip_reason_says_how_to_check_for_cuda(monkeypatch):
    import torch

    from tests import conftest

    class Item:
        def __init__(self):
            self.keywords, self.markers = {"gpu": True}, []

        def add_marker(self, marker):
            self.markers.append(marker)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    item = Item()
    conftest.pytest_collection_modifyitems(None, [item])
    reason = item.markers[0].kwargs["reason"]
    assert "torch.cuda.is_available()" in reason and torch.__version__ in reason and "device tool" not in reason
