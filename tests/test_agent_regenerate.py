"""Drift check of rendered solutions and the `regenerate` command (drift mode, loop mode, replay)."""
import json
import sys
from pathlib import Path

from tests.helpers import cli_runner

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "agent"))
from agent_fakes import DEF, TOY_ROOT  # noqa: E402

from sdk import render  # noqa: E402
from sdk.agent.candidate import config_toml  # noqa: E402
from sdk.agent.commands import regenerate  # noqa: E402
from sdk.regenerate import check_drift, read_render_record, write_render_record  # noqa: E402

PARAMS = {"BLOCK": 256, "UNROLL": 2, "VECTOR": True}


def rendered_solution(root: Path, name="toy") -> Path:
    folder = root / name
    render.render_into("toy_scale", PARAMS, folder / "solution" / "python", TOY_ROOT)
    (folder / "config.toml").write_text(config_toml(name, DEF, "main.py::run", "toy"))
    write_render_record(folder, "toy_scale", PARAMS)
    return folder


def test_render_record_round_trips(tmp_path):
    write_render_record(tmp_path, "toy_scale", PARAMS)
    assert read_render_record(tmp_path) == ("toy_scale", PARAMS)


def test_clean_solution_has_no_drift(tmp_path):
    rendered_solution(tmp_path)
    assert check_drift(tmp_path, TOY_ROOT) == []


def test_edited_missing_and_unrenderable_files_are_named(tmp_path):
    folder = rendered_solution(tmp_path)
    kernel = folder / "solution" / "python" / "toy_kernel.cu"
    kernel.write_text(kernel.read_text().replace("kBlock", "kBlk", 1))
    (folder / "solution" / "python" / "main.py").unlink()
    problems = check_drift(tmp_path, TOY_ROOT)
    assert len(problems) == 2
    assert problems[0].startswith(str(folder / "solution" / "python" / "main.py")) and "missing" in problems[0]
    assert problems[1].startswith(str(kernel)) and "first difference at line 6" in problems[1]
    write_render_record(folder, "toy_scale", {**PARAMS, "BLOCK": 100})
    [problem] = check_drift(tmp_path, TOY_ROOT)
    assert problem.startswith(str(folder / "render.toml")) and "BLOCK=100 not in" in problem


def test_committed_solutions_do_not_drift():
    assert check_drift() == []


def test_regenerate_without_arguments_is_the_drift_check(tmp_path):
    folder = rendered_solution(tmp_path)
    args = ["--solutions-root", str(tmp_path), "--templates-root", str(TOY_ROOT)]
    result = cli_runner().invoke(regenerate, args)
    assert result.exit_code == 0 and "no drift: 1 rendered solution(s)" in result.output
    (folder / "solution" / "python" / "toy_kernel.cuh").write_text("// edited by hand\n")
    result = cli_runner().invoke(regenerate, args)
    assert result.exit_code == 1
    assert f"DRIFT {folder / 'solution' / 'python' / 'toy_kernel.cuh'}: drifted" in result.output


def test_regenerate_runs_the_offline_loop(tmp_path):
    result = cli_runner().invoke(regenerate, [DEF, "--template", "toy_scale", "--templates-root", str(TOY_ROOT),
                                             "--max-iters", "2", "--compile-check", "never",
                                             "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "iteration budget reached (2)" in result.output
    assert (tmp_path / "run" / "candidates.jsonl").read_text().count("\n") == 2
    bad = cli_runner().invoke(regenerate, ["no_such_definition", "--run-dir", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "unknown definition 'no_such_definition'" in bad.output


def test_regenerate_replays_a_recorded_run_from_its_folder(tmp_path):
    common = ["--templates-root", str(TOY_ROOT), "--compile-check", "never"]
    first = cli_runner().invoke(regenerate, [DEF, "--template", "toy_scale", "--max-iters", "3", "--parallel", "2",
                                            "--seed", "4", "--run-dir", str(tmp_path / "a"), *common])
    assert first.exit_code == 0, first.output
    again = cli_runner().invoke(regenerate, ["--backend", "replay", "--replay-from", str(tmp_path / "a"),
                                            "--run-dir", str(tmp_path / "b"), *common])
    assert again.exit_code == 0, again.output
    a, b = ([json.loads(line) for line in (tmp_path / d / "candidates.jsonl").read_text().splitlines()]
            for d in ("a", "b"))
    assert [(r["id"], r["parent"], r["sources_sha256"]) for r in b] == [(r["id"], r["parent"], r["sources_sha256"])
                                                                         for r in a]
    assert json.loads((tmp_path / "b" / "run.json").read_text())["config"]["parallel"] == 2  # taken from the run
