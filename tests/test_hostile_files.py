"""Hostile files: every malformed or escaping input is a one-line BadInputError and nothing lands outside the
folder it belongs in; JSONL ledgers and traces are append-only and a kill mid-write leaves no torn line behind."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pydantic
import pytest

from sdk import definitions, jsonl, solutions, workloads
from sdk._fib import Solution, SourceFile, Trace
from sdk.errors import BadInputError
from tests.adversarial.support import gate, tiny_attention
from tests.helpers import ATTENTION, INDEXER, write_package

ROOT = Path(__file__).resolve().parent.parent
OK_MAIN = "def run(q, k, w, lens, table, out):\n    out.fill_(-1)\n"


def one_line_error(call, *match: str) -> str:
    with pytest.raises(BadInputError) as info:
        call()
    text = str(info.value)
    assert text and "\n" not in text and "Traceback" not in text, text
    for needle in match:
        assert needle in text, (needle, text)
    return text


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


# ---- definitions (JSON), workloads (JSONL), config.toml --------------------------------------------------------

def test_malformed_and_unknown_definition_fields(tmp_path):
    good = json.loads((ROOT / "sdk" / "definitions" / f"{INDEXER}.json").read_text())
    path = tmp_path / "d.json"
    for text, needle in [("{not json", "not a readable JSON definition"), ("[1, 2]", "must be a JSON object"),
                         (json.dumps({**good, "backdoor": 1}), "unknown definition field(s) ['backdoor']"),
                         (json.dumps({**good, "inputs": "nope"}), "invalid definition"),
                         ("\xff\xfe garbage", "")]:
        path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
        one_line_error(lambda: definitions.parse(path), str(path), needle)


def test_malformed_workload_lines(tmp_path):
    good = (ROOT / "sdk" / "workloads" / f"{INDEXER}.jsonl").read_text().splitlines()[0]
    path = tmp_path / "w.jsonl"
    for text, needle in [(good[: len(good) // 2] + "\n", ":1: invalid workload line"),
                         (good + "\n{}\n", ":2: invalid workload line"),
                         (good.replace(INDEXER, ATTENTION) + "\n", ":1: workload of")]:
        path.write_text(text)
        one_line_error(lambda: workloads.parse_jsonl(path, INDEXER), needle)


def test_unknown_workload_fields_are_refused(tmp_path):
    good = json.loads((ROOT / "sdk" / "workloads" / f"{INDEXER}.jsonl").read_text().splitlines()[0])
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({**good, "workload": {**good["workload"], "backdoor": 1}}) + "\n")
    one_line_error(lambda: workloads.parse_jsonl(path, INDEXER), "backdoor")


@pytest.mark.parametrize("config,needle", [
    ("[solution\nname = 'x'", "malformed TOML"),
    ('[solution]\nname = "x"\ndefinition = "d"\nauthor = "a"\nbackdoor = 1\n[build]\n', "unknown key(s) in [solution]"),
    ('[solution]\nname = "x"\ndefinition = "d"\nauthor = "a"\n[build]\n[extra]\n', "unknown table(s) ['extra']"),
    ('[solution]\nname = "x"\ndefinition = "d"\n[build]\n', "[solution] author must be a non-empty string"),
    ('[build]\nlanguage = "python"\n', "missing [solution] table"),
])
def test_malformed_config_toml(tmp_path, config, needle):
    (tmp_path / "config.toml").write_text(config)
    one_line_error(lambda: solutions.load_package(tmp_path), needle)


def test_missing_config(tmp_path):
    one_line_error(lambda: solutions.load_package(tmp_path), "no config.toml")


def test_solution_name_cannot_be_a_path(tmp_path):
    root = write_package(tmp_path / "pkg", INDEXER, OK_MAIN, name="../../escaped")
    one_line_error(lambda: solutions.load_package(root), "name")


# ---- solution sources: escapes, links, folders, sizes, binaries ------------------------------------------------

@pytest.mark.parametrize("source_dir,needle", [("../../elsewhere", "must stay inside"),
                                               ("/etc", "must stay inside")])
def test_source_dir_cannot_escape(tmp_path, source_dir, needle):
    root = write_package(tmp_path / "pkg", INDEXER, OK_MAIN, source_dir=source_dir)
    one_line_error(lambda: solutions.load_package(root), needle)


def test_links_folders_binaries_and_huge_files_in_sources_are_refused(tmp_path):
    root = write_package(tmp_path / "pkg", INDEXER, OK_MAIN)
    src = root / "solution" / "python"
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 1\n")
    cases = []

    def case(make, undo, needle):
        cases.append((make, undo, needle))

    case(lambda: (src / "leak.py").symlink_to(outside), lambda: (src / "leak.py").unlink(), "symlinks are not allowed")
    case(lambda: (src / "sub").mkdir(), lambda: (src / "sub").rmdir(), "must be flat")
    case(lambda: (src / "blob.bin").write_bytes(b"\0"), lambda: (src / "blob.bin").unlink(), "suffix is not a source")
    case(lambda: (src / "bin.py").write_bytes(b"\xff\xfe\0\0"), lambda: (src / "bin.py").unlink(), "not UTF-8")
    case(lambda: os.truncate(_touch(src / "huge.cu"), solutions.MAX_SOURCE_BYTES + 1),
         lambda: (src / "huge.cu").unlink(), "byte limit")
    for make, undo, needle in cases:
        make()
        one_line_error(lambda: solutions.load_package(root), needle)
        undo()
    solutions.load_package(root)  # clean again


def _touch(path: Path) -> Path:
    path.touch()
    return path


def test_a_linked_source_folder_is_refused(tmp_path):
    root = write_package(tmp_path / "pkg", INDEXER, OK_MAIN)
    real = tmp_path / "real"
    (root / "solution" / "python").rename(real)
    (root / "solution" / "python").symlink_to(real)
    one_line_error(lambda: solutions.load_package(root), "symlink")


@pytest.mark.parametrize("path", ["../escaped.py", "/tmp/fib-sdk-escaped.py", "a/../../escaped.py"])
def test_materialize_writes_nothing_outside_its_folder(tmp_path, path):
    """Source paths are validated by the flashinfer-bench model; a model built around that check (a Solution
    loaded by other code) is stopped again when the sources are written."""
    with pytest.raises(pydantic.ValidationError):
        SourceFile(path=path, content="x = 1\n")
    base = solutions.load_package(write_package(tmp_path / "pkg", INDEXER, OK_MAIN)).solution
    hostile = Solution.model_construct(**{**dict(base), "sources": [SourceFile.model_construct(path=path,
                                                                                                content="x = 1\n")]})
    dest = tmp_path / "build"
    dest.mkdir()
    before = files_under(tmp_path)
    one_line_error(lambda: solutions.materialize(hostile, dest), "escapes the build folder")
    assert files_under(tmp_path) - before <= {p for p in files_under(dest)}  # at most the empty package folder
    assert not Path("/tmp/fib-sdk-escaped.py").exists() and not (tmp_path / "escaped.py").exists()


def test_bench_tag_cannot_escape_the_output_folder(tmp_path):
    from sdk.bench.runner import results_path

    from sdk.errors import BadInputError

    out = tmp_path / "out"
    with pytest.raises(BadInputError, match="--tag"):
        results_path({"gpu": None}, "../../../escaped", out)
    assert out.resolve() in results_path({"gpu": None}, "h200.run-1", out).resolve().parents


# ---- JSONL ledgers and traces ----------------------------------------------------------------------------------

APPENDER = """
import sys
from sdk import jsonl
i = 0
while True:
    jsonl.append(sys.argv[1], {"i": i, "pad": "x" * (i % 5000)})
    i += 1
"""


def test_a_kill_mid_append_leaves_only_whole_lines(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", APPENDER, str(ledger)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.time() + 60
        while (not ledger.exists() or ledger.stat().st_size < 50_000) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    lines = list(jsonl.read(ledger))
    assert len(lines) > 20
    assert [json.loads(line)["i"] for line in lines] == list(range(len(lines)))  # in order, none lost or torn


def test_a_torn_final_line_is_skipped_with_a_warning(tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    jsonl.append(ledger, {"i": 0})
    with open(ledger, "ab") as f:
        f.write(b'{"i": 1, "cut sh')
    assert [json.loads(x) for x in jsonl.read(ledger)] == [{"i": 0}]
    assert "torn final line" in capsys.readouterr().err
    with pytest.raises(ValueError):
        jsonl.append(ledger, "two\nlines")


def test_gate_traces_are_appended_never_rewritten(tmp_path):
    """Two gate runs on one trace file (scan-refused: no worker needed) leave both runs' lines, each a Trace."""
    traces = tmp_path / "traces.jsonl"
    for _ in range(2):
        gate("calls_reference", [tiny_attention(1, "a"), tiny_attention(2, "b")], trace_path=traces)
    lines = list(jsonl.read(traces))
    assert len(lines) == 4
    assert [Trace.model_validate_json(line).workload.uuid for line in lines] == ["a", "b", "a", "b"]
    assert files_under(tmp_path) == {traces}
