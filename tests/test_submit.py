"""`fib-sdk submit`: packaging from gate evidence, the refusals, the contest rules and a reproducible archive.

Evidence is made by `write_evidence` from synthetic gate results (flashinfer-bench Traces built the way the gate
builds them), so the reader is tested against what the writer produces. Everything runs on CPU in a temp folder.
"""
import hashlib
import json
import shutil
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner  # noqa: F401
from tests.helpers import cli_runner

from sdk import workloads as wl
from flashinfer_bench.data import Environment, Solution
from sdk.errors import BadInputError
from sdk.gate.runner import make_trace
from sdk.solutions import load_package
from sdk.submit import build_submission, check_package, load_evidence, write_evidence
from sdk.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "submit" / "solutions"
ENV = {"gpu": "NVIDIA H200", "driver": "580.95", "torch": "2.11.0+cu130", "cuda": "13.0", "commit": "0123abc",
       "seed": 0, "trials": 3}
GATE_ENV = Environment(hardware="NVIDIA H200", libs={"torch": "2.11.0+cu130", "cuda": "13.0"})


def gate_results(package, fail=(), drop=0):
    """Synthetic gate results over the official workloads: `fail` uuids are INCORRECT_NUMERICAL, and the last
    `drop` workloads are left out."""
    definition = package.solution.definition
    chosen = list(wl.load(definition))
    chosen = chosen[:len(chosen) - drop]
    out = []
    for w in chosen:
        status = "INCORRECT_NUMERICAL" if w.uuid in fail else "PASSED"
        raw = {"status": status, "max_abs": 0.5 if fail else 0.001, "max_rel": 0.01,
               "calls": [{"wall_ms": 0.05}], "reference_ms": [2.0],
               "strict": {"passed": status == "PASSED", "reason": "" if status == "PASSED" else "contest status"}}
        out.append(SimpleNamespace(workload=w, status=status,
                                   trace=make_trace(package.solution, definition, w, raw, GATE_ENV)))
    return out


def results_doc(package, status="PASSED"):
    rows = [{"definition": package.solution.definition, "solution": package.name, "workload": w.uuid,
             "axes": dict(w.axes), "status": status, "latency_ms": 0.05, "reference_latency_ms": 2.0,
             "floor_ms": 0.01, "peers": {}} for w in wl.load(package.solution.definition)]
    rows.append({**rows[0], "solution": "someone_else"})  # other solutions' rows stay out
    return {"schema": "fib-sdk.results/1", "environment": ENV, "rows": rows, "summary": {}}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository-like temp folder holding both fixture solutions, their evidence and a results file."""
    monkeypatch.chdir(tmp_path)
    for name in ("toy_attention", "toy_moe"):
        shutil.copytree(FIXTURES / name, tmp_path / "solutions" / name)
    results = tmp_path / "repro" / "results" / "nvidia-h200-20260101.json"
    results.parent.mkdir(parents=True)
    packages = {}
    docs = {"schema": "fib-sdk.results/1", "environment": ENV, "rows": [], "summary": {}}
    for name in ("toy_attention", "toy_moe"):
        package = load_package(tmp_path / "solutions" / name)
        packages[name] = package
        docs["rows"] += [r for r in results_doc(package)["rows"] if r["solution"] == name]
        write_evidence(package, gate_results(package), ENV, "repro/results/nvidia-h200-20260101.json",
                       tmp_path / "repro" / "evidence")
    results.write_text(json.dumps(docs))
    (tmp_path / "submission.toml").write_text('[submit]\nsolutions = ["solutions/toy_attention"]\n')
    return SimpleNamespace(root=tmp_path, packages=packages, evidence=tmp_path / "repro" / "evidence")


def test_packages_a_single_kernel(repo):
    package = repo.packages["toy_attention"]
    sub = build_submission([package.root], Path("dist"), repo.evidence)
    out = repo.root / "dist" / "submission"
    kernel = out / "toy_attention"
    assert not (out / "config.toml").exists()  # config lives in the kernel folder only
    assert (kernel / "config.toml").read_bytes() == (package.root / "config.toml").read_bytes()
    manifest = json.loads((repo.evidence / "toy_attention" / "manifest.json").read_text())
    shipped = sorted(p.name for p in (kernel / "solution" / "python").iterdir())
    assert shipped == ["helpers.py", "main.py"]
    for name in shipped:
        data = (kernel / "solution" / "python" / name).read_bytes()
        assert data == (package.source_dir / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == manifest["source_sha256"][name]
    # solution.json and the root packed_solution.json load with flashinfer-bench's own model, sources intact
    for path in (kernel / "solution.json", out / "packed_solution.json"):
        loaded = Solution.model_validate_json(path.read_text())
        assert loaded.hash() == package.solution.hash()
        assert {s.path: s.content for s in loaded.sources} == \
            {p.name: p.read_text() for p in package.source_dir.iterdir()}
    # evidence and results rows travel beside the sources, never inside them
    assert (kernel / "evidence" / "traces.jsonl").read_bytes() == \
        (repo.evidence / "toy_attention" / "traces.jsonl").read_bytes()
    assert len((kernel / "evidence" / "traces.jsonl").read_text().splitlines()) == 23
    results = json.loads((kernel / "results.json").read_text())
    assert results["schema"] == "fib-sdk.results/2"  # rows are copied through the current row model
    assert len(results["rows"]) == 23 and {r["solution"] for r in results["rows"]} == {"toy_attention"}
    assert results["sources"][0]["file"] == "nvidia-h200-20260101.json"
    # the ledger: copied, summed by role/model/phase/definition; the human-input line is not a call
    assert (kernel / "ledger.jsonl").read_bytes() == (package.root / "ledger.jsonl").read_bytes()
    ledger_md = (kernel / "LEDGER.md").read_text()
    assert "| all     | 3       | 7000           | 2900            | 0.050500     | 1" in ledger_md
    for heading in ("## By role", "## By model", "## By phase", "## By definition"):
        assert heading in ledger_md
    assert "| coder   | 2" in ledger_md and "| implement | 1" in ledger_md
    # the archive and its checksum
    digest = hashlib.sha256(sub.archive.read_bytes()).hexdigest()
    assert sub.sha256 == digest
    assert (repo.root / "dist" / "submission.tar.gz.sha256").read_text() == f"{digest}  submission.tar.gz\n"


def test_multi_kernel_layout_and_zero_ledger(repo):
    build_submission([p.root for p in repo.packages.values()], Path("dist"), repo.evidence)
    out = repo.root / "dist" / "submission"
    assert sorted(p.name for p in out.iterdir()) == ["SUBMISSION.md", "toy_attention", "toy_moe"]
    assert not (out / "packed_solution.json").exists()  # one root file would stand in for every kernel
    moe = out / "toy_moe"
    assert sorted(p.name for p in (moe / "solution" / "cuda_py").iterdir()) == ["kernel.cu", "main.py"]
    assert (moe / "ledger.jsonl").read_bytes() == b""
    assert "zero (hand-tuned / offline-generated: no model calls)" in (moe / "LEDGER.md").read_text()
    index = (out / "SUBMISSION.md").read_text()
    assert "| `toy_moe/` | toy_moe | moe_fp8_block_scale" in index and "19/19 PASSED" in index


def test_archive_is_byte_identical_when_nothing_changed(repo):
    dirs = [p.root for p in repo.packages.values()]
    first = build_submission(dirs, Path("dist"), repo.evidence)
    data, sha = first.archive.read_bytes(), Path(f"{first.archive}.sha256").read_bytes()
    second = build_submission(dirs, Path("dist"), repo.evidence)
    assert second.archive.read_bytes() == data and Path(f"{second.archive}.sha256").read_bytes() == sha
    assert data[4:8] == b"\0\0\0\0"  # gzip header mtime
    with tarfile.open(second.archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "submission"
    assert all(not n.startswith("/") and ".." not in n.split("/") for n in names)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert {m.mode for m in members if m.isfile()} == {0o644}
    assert "submission/toy_moe/solution/cuda_py/kernel.cu" in names


def test_refuses_missing_evidence(repo):
    shutil.rmtree(repo.evidence / "toy_moe")
    with pytest.raises(BadInputError, match=r"toy_moe: no gate evidence .*manifest.json is missing"):
        build_submission([repo.packages["toy_moe"].root], Path("dist"), repo.evidence)
    assert not (repo.root / "dist").exists()  # a refusal writes nothing


def test_refuses_a_failed_workload(repo):
    package = repo.packages["toy_moe"]
    bad = wl.load(package.solution.definition)[3].uuid
    write_evidence(package, gate_results(package, fail={bad}), ENV, None, repo.evidence)
    with pytest.raises(BadInputError, match=rf"1 non-PASSED workload\(s\) \({bad[:8]} INCORRECT_NUMERICAL\)"):
        load_evidence(package, repo.evidence)


def test_refuses_evidence_missing_official_workloads(repo):
    package = repo.packages["toy_attention"]
    write_evidence(package, gate_results(package, drop=2), ENV, None, repo.evidence)
    with pytest.raises(BadInputError, match=r"covers 21 of 23 official workloads"):
        load_evidence(package, repo.evidence)


def test_refuses_evidence_for_other_sources(repo):
    package = repo.packages["toy_attention"]
    main = package.source_dir / "main.py"
    main.write_text(main.read_text() + "\n# tuned after the gate ran\n")
    with pytest.raises(BadInputError, match=r"gate evidence was made for other sources \(main.py differ\)"):
        build_submission([package.root], Path("dist"), repo.evidence)


def test_refuses_a_spec_change_with_the_same_sources(repo):
    package = repo.packages["toy_attention"]
    config = package.root / "config.toml"
    config.write_text(config.read_text().replace("destination_passing_style = true",
                                                 "destination_passing_style = false"))
    with pytest.raises(BadInputError, match=r"for another solution \(the build spec differs in destination_passing"):
        load_evidence(load_package(package.root), repo.evidence)


def test_refuses_a_failed_results_row(repo):
    package = repo.packages["toy_attention"]
    path = repo.root / "repro" / "results" / "mine.json"
    path.write_text(json.dumps(results_doc(package, status="TIMEOUT")))
    with pytest.raises(BadInputError, match=r"reports workload \w{8} as TIMEOUT \(\+22 more\)"):
        build_submission([package.root], Path("dist"), repo.evidence, [path])


def test_results_file_choice(repo):
    package = repo.packages["toy_attention"]
    (repo.root / "repro" / "results" / "nvidia-h200-20260101.json").rename(repo.root / "elsewhere.json")
    with pytest.raises(BadInputError, match=r"names results file repro/results/nvidia-h200-20260101.json, which is "
                                            r"missing \(restore it or pass --results\)"):
        build_submission([package.root], Path("dist"), repo.evidence)
    # evidence that names no file: the newest results file with rows of the solution
    write_evidence(package, gate_results(package), ENV, None, repo.evidence)
    newest = repo.root / "repro" / "results" / "nvidia-h200-20260102.json"
    newest.write_text(json.dumps(results_doc(package)))
    sub = build_submission([package.root], Path("dist"), repo.evidence)
    shipped = json.loads((sub.folder / "toy_attention" / "results.json").read_text())
    assert shipped["sources"][0]["file"] == newest.name and len(shipped["rows"]) == 23


def test_ledger_reading_is_tolerant(tmp_path):
    from sdk.submit import ledger

    path = tmp_path / "ledger.jsonl"
    path.write_text('{"input_tokens": 10, "output_tokens": 4, "fib.cost.usd": 0.5, "model": "m", "role": "r"}\n'
                    "not json\n"
                    '{"kind": "event", "gen_ai.operation.name": "start"}\n'
                    '{"kind": "call", "gen_ai.usage.input_tokens": 1, "gen_ai.usage.output_tokens": 2}\n'
                    '{"kind": "call", "gen_ai.usage.input_tokens": 5')  # torn final line: skipped
    summary = ledger.summarize(path)
    assert summary["total"] == {"calls": 2, "input_tokens": 11, "output_tokens": 6, "cost_usd": 0.5,
                                "unpriced_calls": 1}
    assert summary["skipped_lines"] == 1 and summary["reason"] is None
    assert set(summary["by"]["model"]) == {"m", "-"} and set(summary["by"]["role"]) == {"r", "-"}


@pytest.mark.parametrize("name,text,expected", [
    ("main.py", "import flashinfer\n", "imports flashinfer"),
    ("main.py", "def run(x):\n    from deep_gemm import fp8_gemm_nt\n    return x\n", "imports deep_gemm"),
    ("main.py", "import socket\n", "imports socket (no network"),
    ("main.py", "import subprocess\nsubprocess.check_call(['wget', 'http://x/k.cu'])\n", "runs wget"),
    ("main.py", "import requests\n", "imports requests"),
    ("kernel.cu", '#include <flashinfer/attention/decode.cuh>\n', "includes flashinfer headers"),
    ("kernel.cuh", '#include <curl/curl.h>\n', "includes curl/curl.h (no network"),
    ("blob.h", "static const char k[] = \"\x7fELF\\x02\";\n", "ELF"),
])
def test_rules_reject_library_network_and_binary(repo, name, text, expected):
    package = repo.packages["toy_moe"]
    (package.source_dir / name).write_text(text)
    found = check_package(package)
    assert any(expected in str(v) for v in found), found
    with pytest.raises(BadInputError, match=r"toy_moe: breaks the contest rules: "):
        build_submission([package.root], Path("dist"), repo.evidence)


@pytest.mark.parametrize("name,data", [("kernel.cubin", b"\x7fELF\x02\x01"), ("libk.so", b"\x7fELF"),
                                       (".cache.bin", b"\x50\xed\x55\xba\x01"), ("table.h", b"\xff\xfe\x00\x01")])
def test_rules_reject_binary_files(repo, name, data):
    package = repo.packages["toy_attention"]
    (package.source_dir / name).write_bytes(data)
    found = check_package(package)
    assert [v.path for v in found] == [name]
    assert any(word in found[0].message for word in ("binar", "fatbin")), found


def test_rules_accept_mentions_in_comments_and_docstrings():
    from sdk.submit.rules import check_text

    assert check_text("a.py", '"""Mirrors flashinfer\'s layout; no socket, no curl."""\n# import deep_gemm\n') == []
    assert check_text("a.cu", "// #include <flashinfer/x.cuh>\n/* system(\"curl x\") */\nint x;\n") == []


def test_cli_packages_and_refuses_with_one_line(repo):
    runner = cli_runner()
    ok = runner.invoke(main, ["submit", "solutions/toy_attention", "--gate"])  # no GPU: committed evidence
    assert ok.exit_code == 0, ok.output
    assert "no CUDA GPU here: packaging from the committed evidence" in ok.output
    assert "dist/submission.tar.gz sha256 " in ok.output
    shutil.rmtree(repo.evidence / "toy_moe")
    bad = runner.invoke(main, ["submit", "solutions/toy_moe"])
    assert bad.exit_code == 3
    assert bad.output.strip().splitlines() == [bad.output.strip()]
    assert bad.output.startswith("error: toy_moe: no gate evidence")


def test_gate_flag_on_a_gpu_records_evidence_then_packages(repo, monkeypatch):
    """The --gate wiring with the GPU parts replaced: the gate's results become evidence, then a submission."""
    from sdk import gate
    from sdk.submit import gating

    package = repo.packages["toy_moe"]
    shutil.rmtree(repo.evidence / "toy_moe")
    calls = []

    def fake_gate(solution, definition, workloads, **kw):
        calls.append((definition, len(workloads), kw["trials"], kw["seed"], kw["tol"]))
        return gate_results(package)

    monkeypatch.setattr(gating, "gpu_available", lambda: True)
    monkeypatch.setattr(gating, "gate_environment", lambda trials, seed: {**ENV, "trials": trials, "seed": seed})
    monkeypatch.setattr(gate, "gate_solution", fake_gate)
    result = cli_runner().invoke(main, ["submit", "solutions/toy_moe", "--gate"])
    assert result.exit_code == 0, result.output
    definition = package.solution.definition
    ((seen_definition, count, trials, seed, tol),) = calls
    assert (seen_definition, count, trials, tol) == (definition, 19, 3, gate.contest_tolerance(definition))
    assert isinstance(seed, int)  # drawn from the OS, recorded in the manifest
    assert json.loads((repo.evidence / "toy_moe" / "manifest.json").read_text())["environment"]["seed"] == seed
    manifest = json.loads((repo.evidence / "toy_moe" / "manifest.json").read_text())
    assert manifest["results_file"] == "repro/results/nvidia-h200-20260101.json"
    assert (manifest["passed"], manifest["total"], manifest["environment"]["trials"]) == (19, 19, 3)
    assert (repo.root / "dist" / "submission" / "toy_moe" / "evidence" / "manifest.json").exists()


# ---- the command a newcomer runs: defaults, stale outputs, --out ------------------------------------------------

def test_submit_without_arguments_packages_submission_toml_from_any_subfolder(repo, monkeypatch):
    monkeypatch.chdir(repo.root / "solutions" / "toy_moe")  # deep inside the project
    result = cli_runner().invoke(main, ["submit"])
    assert result.exit_code == 0, result.output
    out = repo.root / "dist" / "submission"
    assert sorted(p.name for p in out.iterdir()) == ["SUBMISSION.md", "packed_solution.json", "toy_attention"]
    assert (repo.root / "dist" / "submission.tar.gz").is_file()
    assert not (repo.root / "solutions" / "toy_moe" / "dist").exists()


def test_submit_without_arguments_or_submission_toml_says_what_to_do(repo):
    (repo.root / "submission.toml").unlink()
    result = CliRunner(env={"FIB_SDK_ROOT": str(repo.root)}).invoke(main, ["submit"])
    assert result.exit_code == 3
    assert result.stderr.strip() == (f"error: no SOLUTION_DIRS given and no {repo.root / 'submission.toml'} (a [submit] "
                                     "solutions = [...] list): name the folders to submit")


def test_a_refused_submit_removes_the_previous_submission(repo):
    runner = cli_runner()
    assert runner.invoke(main, ["submit", "solutions/toy_attention"]).exit_code == 0
    dist = repo.root / "dist"
    assert sorted(p.name for p in dist.iterdir()) == ["submission", "submission.tar.gz", "submission.tar.gz.sha256"]
    main_py = repo.packages["toy_attention"].source_dir / "main.py"
    main_py.write_text(main_py.read_text() + "\n# edited after the gate ran\n")
    bad = runner.invoke(main, ["submit", "solutions/toy_attention"])
    assert bad.exit_code == 3
    assert "gate evidence was made for other sources" in bad.stderr and "removed the previous" in bad.stderr
    assert list(dist.iterdir()) == []  # nothing left that could be taken for a current submission


def test_out_writes_only_inside_its_folder(repo):
    runner = cli_runner()
    mine = repo.root / "mine"
    mine.mkdir()
    beside = repo.root / "mine.tar.gz"
    beside.write_bytes(b"someone else's archive")
    (mine / "notes.txt").write_text("keep me")
    result = runner.invoke(main, ["submit", "solutions/toy_attention", "--out", "mine"])
    assert result.exit_code == 0, result.output
    assert beside.read_bytes() == b"someone else's archive"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "submission", "submission.tar.gz",
                                                      "submission.tar.gz.sha256"]
    assert (mine / "notes.txt").read_text() == "keep me"
    # a second run replaces its own outputs; an archive it did not write is refused, and stays
    assert runner.invoke(main, ["submit", "solutions/toy_attention", "--out", "mine"]).exit_code == 0
    other = repo.root / "other"
    other.mkdir()
    (other / "submission.tar.gz").write_bytes(b"not ours")
    refused = runner.invoke(main, ["submit", "solutions/toy_attention", "--out", "other"])
    assert refused.exit_code == 3 and "refusing to replace" in refused.stderr
    assert sorted(p.name for p in other.iterdir()) == ["submission.tar.gz"]
    assert (other / "submission.tar.gz").read_bytes() == b"not ours"


# ---- the committed submission ------------------------------------------------------------------------------------

def test_the_committed_submission_packages_from_its_committed_evidence(tmp_path):
    """`nox -s submit` on this checkout: submission.toml's kernels, their evidence and results files as committed
    (evidence that no longer matches the sources, a missing results file or a failed row would refuse it)."""
    from sdk.paths import under_root

    result = cli_runner().invoke(main, ["submit", "--out", str(tmp_path / "dist")])
    assert result.exit_code == 0, result.output + result.stderr
    kernels = sorted(p.name for p in (tmp_path / "dist" / "submission").iterdir() if p.is_dir())
    assert len(kernels) == 3 and (tmp_path / "dist" / "submission.tar.gz").is_file(), kernels
    assert under_root("submission.toml").is_file()
