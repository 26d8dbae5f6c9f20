"""`fib-sdk` as a user meets it: one error style with an exit status per kind, option values checked before anything
runs, one-line messages for bad solutions, a fast `--help`, and default paths taken from the project root."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk import cli, definitions, paths
from sdk.cli import main
from sdk.errors import BadInputError, one_line
from tests.helpers import cli_runner, INDEXER, write_package

ROOT = Path(__file__).resolve().parent.parent
OK_MAIN = "def run(q, k, w, lens, table, out):\n    out.fill_(-1)\n"


def invoke(*args: str):
    return cli_runner().invoke(main, [str(a) for a in args])


def assert_one_error_line(result, code: int, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback (most recent call last)" not in result.output
    assert not any(line.startswith(("Error:", "Usage:")) for line in result.output.splitlines()), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def package(tmp_path):
    return write_package(tmp_path / "pkg", INDEXER, OK_MAIN)


@pytest.fixture
def no_gate(monkeypatch):
    """Any gate run fails the test: the cases below must be refused before a worker starts."""
    from sdk import gate

    def refuse(*args, **kwargs):
        raise AssertionError("the gate ran")
    monkeypatch.setattr(gate, "gate_solution", refuse)


# ---- usage errors: exit 2, one line, nothing runs ----------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["gate", "{pkg}", "--trials", "0"], "'--trials': 0 is not in the range x>=1"),
    (["gate", "{pkg}", "--trials", "-2"], "'--trials': -2 is not in the range x>=1"),
    (["gate", "{pkg}", "--timeout", "0"], "'--timeout'"),
    (["bench", "{pkg}", "--trials", "0"], "'--trials': 0 is not in the range x>=1"),
    (["bench", "{pkg}", "--iters", "0"], "'--iters': 0 is not in the range x>=1"),
    (["bench", "{pkg}", "--iters", "-1"], "'--iters'"),
    (["bench", "{pkg}", "--stride", "0"], "'--stride'"),
    (["gate", "{pkg}", "--bogus"], "No such option '--bogus'"),
    (["gate"], "Missing argument 'SOLUTION_DIR'"),
    (["gate", "{pkg}", "--device", "gpu"], "use cpu, cuda or cuda:N"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["report"], "give RESULTS files or --latest"),
])
def test_usage_errors_are_one_line_with_exit_2(package, no_gate, args, needle):
    result = invoke(*[a.replace("{pkg}", str(package)) for a in args])
    line = assert_one_error_line(result, 2, needle)
    assert line.endswith("--help')")  # where to look next


def test_zero_trials_cannot_pass_an_always_raising_solution(tmp_path, no_gate):
    raising = write_package(tmp_path / "raises", INDEXER, "def run(q, k, w, lens, table, out):\n"
                                                           "    raise RuntimeError('always')\n")
    assert_one_error_line(invoke("gate", raising, "--trials", "0"), 2, "--trials")


def test_device_cuda_without_cuda_is_one_line(package, no_gate, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        assert_one_error_line(invoke("gate", package, "--device", device), 4, f"--device {device}",
                              "sees 0 CUDA device(s)")


def test_traces_are_refused_when_their_folder_does_not_exist(tmp_path, package, no_gate):
    missing = tmp_path / "no" / "such"
    assert_one_error_line(invoke("gate", package, "--traces", missing / "t.jsonl"), 2, "'--traces'",
                          f"folder {missing} does not exist")
    assert_one_error_line(invoke("bench", package, "--traces", missing / "deeper"), 2, "'--traces'",
                          f"folder {missing} does not exist")
    assert_one_error_line(invoke("gate", package, "--traces", tmp_path), 2, "is a folder")
    assert not (tmp_path / "no").exists()  # nothing was created


# ---- bad input: exit 3, one line ---------------------------------------------------------------------------------

def test_unknown_definition_is_named_unknown_and_the_names_listed(tmp_path, no_gate):
    line = assert_one_error_line(invoke("workloads", "nope"), 3, "unknown definition 'nope'; known: ")
    assert all(name in line for name in definitions.names())
    config = write_package(tmp_path / "p", INDEXER, OK_MAIN) / "config.toml"
    config.write_text(config.read_text().replace(INDEXER, "nope"))
    for command in ("gate", "submit"):  # submit used to call this missing evidence
        line = assert_one_error_line(invoke(command, tmp_path / "p"), 3, "unknown definition 'nope'; known: ")
        assert "evidence" not in line


def test_missing_entry_file_is_a_short_line(package, no_gate):
    config = package / "config.toml"
    config.write_text(config.read_text().replace("main.py::run", "kernel.py::run"))
    line = assert_one_error_line(invoke("gate", package), 3, "'kernel.py'", "not among the sources", "main.py")
    assert len(line.replace(str(package), "")) < 120 and "input_value" not in line and "pydantic" not in line


@pytest.mark.parametrize("main_py,needles", [
    ("def run(a, b):\n    pass\n", ["must take 6 positional arguments", "has (a, b)"]),
    ("def run(q, k, w, lens, table, out, extra):\n    pass\n", ["must take 6 positional arguments"]),
    ("def other():\n    pass\n", ["defines no 'run'"]),
])
def test_wrong_entry_point_is_one_line_before_any_gate(tmp_path, no_gate, main_py, needles):
    root = write_package(tmp_path / "p", INDEXER, main_py)
    assert_one_error_line(invoke("gate", root), 3, *needles)
    assert_one_error_line(invoke("bench", root), 3, *needles)


@pytest.mark.parametrize("main_py", [
    "def run(q, k, w, lens, table, out, extra=None):\n    pass\n",   # a defaulted extra argument
    "def run(*args):\n    pass\n",
    "import functools\n@functools.lru_cache\ndef run(a):\n    pass\n",  # decorated: left to the build
    "from .impl import run\n",                                          # imported: left to the build
    "import torch\nif torch.cuda.is_available():\n    def run(q, k, w, lens, table, out):\n        pass\n"
    "else:\n    def run(q, k, w, lens, table, out):\n        pass\n",
])
def test_entry_points_the_syntax_cannot_settle_are_not_refused(tmp_path, main_py):
    from sdk import solutions

    package = solutions.load_package(write_package(tmp_path / "p", INDEXER, main_py))
    solutions.check_entry(package, definitions.load(INDEXER))  # no error


def test_errors_of_the_agent_commands_have_the_same_style(tmp_path):
    assert_one_error_line(invoke("ledger", tmp_path / "nothing"), 3, "no ledger.jsonl")
    assert_one_error_line(invoke("regenerate", "no_such_definition", "--run-dir", tmp_path / "r"), 3,
                          "unknown definition 'no_such_definition'")


def test_pydantic_errors_are_condensed():
    from sdk._fib import BuildSpec

    with pytest.raises(Exception) as info:
        BuildSpec(language="python", target_hardware=["cuda"], entry_point="main.py", destination_passing_style=True)
    assert len(str(info.value)) > 150  # pydantic's own text: input dump and URL
    text = one_line(info.value)
    assert "\n" not in text and "input_value" not in text and "errors.pydantic.dev" not in text
    assert "main.py" in text and len(text) < 150


def test_internal_errors_are_one_line_with_the_traceback_on_request(monkeypatch):
    from sdk import definitions as defs

    def broken():
        raise KeyError("a bug")
    monkeypatch.setattr(defs, "names", broken)
    assert_one_error_line(invoke("definitions"), 70, "internal error", "KeyError", "FIB_SDK_TRACEBACK=1")
    monkeypatch.setenv("FIB_SDK_TRACEBACK", "1")
    result = invoke("definitions")
    assert isinstance(result.exception, KeyError)


def test_python_m_sdk_submit_goes_through_the_same_error_handling():
    done = subprocess.run([sys.executable, "-m", "sdk.submit", "--bogus"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: No such option '--bogus'"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_python_without_click_gets_one_line(tmp_path):
    code = ("import sys, runpy; sys.modules['click'] = None; sys.argv = ['fib-sdk', '--help']; "
            "runpy.run_module('sdk', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# ---- bench outcome -----------------------------------------------------------------------------------------------

def _results(statuses):
    rows = [{"solution": "s", "workload": f"w{i}", "axes": {"n": i}, "status": status, "latency_ms": 1.0 if
             status == "PASSED" else None, "reference_latency_ms": 2.0, "floor_ms": None, "peers": {},
             "aa_noise_pct": None} for i, status in enumerate(statuses)]
    return {"rows": rows, "summary": {}, "environment": {"timing_method": "wall-clock"}}


@pytest.mark.parametrize("statuses,code", [(["RUNTIME_ERROR", "COMPILE_ERROR"], 1), ([], 1),
                                           (["RUNTIME_ERROR", "PASSED"], 0)])
def test_bench_exits_non_zero_when_no_row_passed(package, monkeypatch, tmp_path, statuses, code):
    from sdk.bench import runner

    seen = {}

    def fake_run_bench(packages, config, **kw):
        seen.update(kw, config=config)
        return _results(statuses), None
    monkeypatch.setattr(runner, "run_bench", fake_run_bench)
    for extra in ([], ["--json"]):
        result = invoke("bench", package, "--out", tmp_path, *extra)
        assert result.exit_code == code, result.output
    assert seen["out_dir"] == tmp_path
    if code:
        assert f"bench: 0/{len(statuses)} rows PASSED" in invoke("bench", package, "--out", tmp_path).stderr


def test_bench_definition_filter_keeps_that_definitions_packages(monkeypatch, tmp_path):
    from sdk.bench import runner

    seen = {}

    def fake_run_bench(packages, config, **kw):
        seen["definitions"] = sorted({p.solution.definition for p in packages})
        seen["tag"] = kw["tag"]
        return _results(["PASSED"]), None
    monkeypatch.setattr(runner, "run_bench", fake_run_bench)
    result = invoke("bench", "--definition", "moe", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert seen["definitions"] == ["moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"]
    assert seen["tag"] == "moe"  # its own results file
    invoke("bench", "--definition", "moe", "--tag", "repro", "--out", tmp_path)
    assert seen["tag"] == "repro-moe"
    result = invoke("bench", "--definition", "no_such_op", "--out", tmp_path)
    assert result.exit_code == 3 and "no package's definition contains no_such_op" in result.stderr


# ---- --help: fast, torch-free, the same texts ---------------------------------------------------------------------

def test_help_imports_neither_torch_nor_the_sdk_modules():
    code = ("import sys\nfrom sdk.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flashinfer_bench', 'pydantic', "
            "'tabulate', 'jinja2') or m.startswith(('sdk.agent', 'sdk.gate', 'sdk.bench', 'sdk.submit', "
            "'sdk.report', 'sdk.definitions')))\nprint('HEAVY', heavy, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert "HEAVY []" in done.stderr, done.stderr
    for name in cli.LAZY_COMMANDS:
        assert name in done.stdout


def test_help_takes_under_a_second():
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "sdk", "--help"], cwd=ROOT, capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
        assert done.returncode == 0 and "Commands:" in done.stdout
    assert best < 1.0, f"fib-sdk --help took {best:.2f} s"


def test_lazy_help_texts_are_the_commands_own():
    for name, (module, attribute, text) in cli.LAZY_COMMANDS.items():
        command = main.get_command(None, name)
        assert command is not None and command.name == name
        assert text == command.get_short_help_str(1000), name


# ---- paths from the project root ---------------------------------------------------------------------------------

def test_project_root_is_found_from_any_folder_inside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("FIB_SDK_ROOT", raising=False)
    (tmp_path / "proj" / "a" / "b").mkdir(parents=True)
    (tmp_path / "proj" / "submission.toml").write_text("[submit]\nsolutions = []\n")
    monkeypatch.chdir(tmp_path / "proj" / "a" / "b")
    assert paths.project_root() == (tmp_path / "proj").resolve()
    assert paths.under_root("repro/evidence") == (tmp_path / "proj" / "repro" / "evidence").resolve()
    monkeypatch.chdir(tmp_path)  # outside any project: the checkout the SDK was loaded from
    assert paths.project_root() == ROOT
    monkeypatch.setenv("FIB_SDK_ROOT", str(tmp_path / "proj" / "a"))
    assert paths.project_root() == (tmp_path / "proj" / "a").resolve()


def test_solution_dirs_and_defaults_work_from_another_folder(tmp_path, monkeypatch, no_gate):
    """From outside the checkout, `solutions/...` and the bench's default results folder come from the root."""
    from sdk.bench import runner

    monkeypatch.delenv("FIB_SDK_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    seen = {}

    def fake_run_bench(packages, config, **kw):
        seen.update(kw, names=[p.name for p in packages])
        return _results(["PASSED"]), None
    monkeypatch.setattr(runner, "run_bench", fake_run_bench)
    result = invoke("bench", "solutions/moe_torch_baseline")
    assert result.exit_code == 0, result.output
    assert seen["names"] == ["moe_torch_baseline"] and seen["out_dir"] == ROOT / "repro" / "results"


def test_report_and_evidence_defaults_are_under_the_root(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for command, option in (("report", "--results-dir"), ("report", "--paper"), ("evidence", "--out"),
                            ("submit", "--out"), ("submit", "--evidence"), ("bench", "--out")):
        text = " ".join(invoke(command, "--help").output.split())
        default = re.search(rf" {option} [A-Z]+ .*?\[default: ([^\]]*)\]", text).group(1)  # the option's own
        assert "under the project root" in default, (command, option, default)


def test_bad_input_error_is_what_the_sdk_raises_for_a_bad_config(tmp_path):
    (tmp_path / "config.toml").write_text("[solution\n")
    assert_one_error_line(invoke("gate", tmp_path), 3, "malformed TOML")
    with pytest.raises(BadInputError):
        from sdk import solutions

        solutions.load_package(tmp_path)


def test_json_outputs_stay_machine_readable():
    result = invoke("definitions", "--json")
    assert result.exit_code == 0 and {d["name"] for d in json.loads(result.stdout)} == set(definitions.names())


def test_remote_modal_without_the_package_names_the_extra(package, monkeypatch):
    monkeypatch.setitem(sys.modules, "modal", None)  # not installed, whatever this machine has
    assert_one_error_line(invoke("bench", package, "--remote", "modal"), 4, "[modal]", "modal token new",
                          "Remote bench on Modal")


def test_bench_settings_size_a_definition_and_the_command_line_wins(tmp_path):
    from sdk.bench.settings import settings_for

    settings = tmp_path / "settings.toml"
    settings.write_text("[indexer]\niters = 0\n[attention]\nwarmup = 2\n")
    baseline = ROOT / "solutions" / "dsa_topk_indexer_torch_baseline"
    # the file's value applies: its error names the setting
    assert_one_error_line(invoke("bench", baseline, "--settings", settings, "--no-peers"), 3,
                          "bench settings", "iters")
    # an option given on the command line wins over the file: the run gets as far as choosing workloads
    assert_one_error_line(invoke("bench", baseline, "--settings", settings, "--iters", 3, "--workloads", "zzzz",
                                 "--no-peers"), 3, "zzzz")
    assert settings_for(settings, {"dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"}) == {"warmup": 2}
    with pytest.raises(BadInputError, match="use --definition"):
        settings_for(settings, {INDEXER, "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"})
    settings.write_text("[indexer]\nspeed = 11\n")
    with pytest.raises(BadInputError, match="unknown setting"):
        settings_for(settings, {INDEXER})


def test_the_repro_settings_fit_every_definition():
    from sdk.bench.config import BenchConfig
    from sdk.bench.settings import settings_for

    for name in definitions.names():
        BenchConfig(**settings_for(ROOT / "repro" / "settings.toml", {name}))  # valid values for every definition


def test_bench_settings_choose_the_peers_unless_the_command_line_does(tmp_path, monkeypatch):
    from sdk.bench import runner

    seen = []

    def fake_run_bench(packages, config, **kwargs):
        seen.append(list(config.peer_filter))
        return _results(["PASSED"]), None
    monkeypatch.setattr(runner, "run_bench", fake_run_bench)
    settings = tmp_path / "settings.toml"
    settings.write_text('[moe]\npeer_filter = ["routing untimed"]\n')
    baseline = ROOT / "solutions" / "moe_torch_baseline"
    assert invoke("bench", baseline, "--settings", settings).exit_code == 0
    assert invoke("bench", baseline, "--settings", settings, "--peers", "triton").exit_code == 0
    assert invoke("bench", baseline).exit_code == 0
    assert seen == [["routing untimed"], ["triton"], []]
