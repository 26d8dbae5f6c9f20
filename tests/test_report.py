"""Report rendering from a small synthetic results file: tables carry the numbers, plots are written, and the
output is byte-identical for the same input."""
import json
import os
from pathlib import Path

import pytest
from tests.helpers import cli_runner, noxfile_module

from sdk.errors import BadInputError
from sdk.report import render_report
from sdk.report.commands import report

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "repro" / "paper.toml"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
ATTN = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"


def row(definition, uuid, axes, latency, ref, floor, status="PASSED", peers=None, solution="ours-v1",
        reason=None, noise=1.25):
    return {"definition": definition, "solution": solution, "workload": uuid, "axes": axes, "status": status,
            "reason": reason, "latency_ms": latency, "reference_latency_ms": ref, "floor_ms": floor,
            "work": {"bytes": 1000, "flops": 2000}, "aa_noise_pct": noise, "peers": peers or {}}


def results_doc(rows):
    return {"schema": "fib-sdk.results/1",
            "environment": {"gpu": "NVIDIA H200", "driver": "580.00", "cuda": "13.0", "torch": "2.11.0+cu130",
                            "triton": "3.6.0", "flashinfer_bench": "0.1.2", "commit": "abc1234", "seed": 7,
                            "timing_method": "cuda-events", "ceilings": {"hbm_bytes_per_s": 4.3e12,
                                                                          "fp8_flops_per_s": 1.3e15,
                                                                          "bf16_flops_per_s": 7.5e14}},
            "rows": rows, "summary": {}}


ROWS = [
    row(MOE, "11111111-aaaa", {"seq_len": 7}, 0.0421, 35.0, 0.0105,
        peers={"deepgemm": {"latency_ms": 0.0612, "status": "PASSED", "cuda_graph": True}}),
    row(MOE, "22222222-bbbb", {"seq_len": 901}, None, 120.0, 0.21, status="INCORRECT_NUMERICAL",
        reason="matched ratio 0.81 < 0.9",
        peers={"deepgemm": {"latency_ms": None, "status": "RUNTIME_ERROR", "cuda_graph": False}}),
    row(ATTN, "33333333-cccc", {"num_tokens": 1, "num_pages": 100}, 0.0125, 2.5, 0.0031, noise=None),
    row(ATTN, "44444444-dddd", {"num_tokens": 64, "num_pages": 900}, 0.0475, 9.5, 0.0351),
    # Non-finite floats arrive as strings in results files: shown as they are, never used in a ratio.
    row(ATTN, "55555555-eeee", {"num_tokens": 128, "num_pages": 900}, 0.095, 19.0, "nan", noise="nan"),
]


@pytest.fixture
def results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results_doc(ROWS)))
    return path


def cells(text: str, *leading: str) -> list[str]:
    """The stripped cells of the one table line whose first cells are `leading`."""
    tables = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    hits = [row for row in tables if row[: len(leading)] == list(leading)]
    assert len(hits) == 1, (leading, hits)
    return hits[0]


def test_report_has_tables_numbers_and_plots(results_file, tmp_path):
    out = render_report([results_file], PAPER, tmp_path / "out")
    text = out.read_text()
    assert out == tmp_path / "out" / "REPORT.md"
    for expected in ("92.68x", "1101.02x", "181.35x", "1.71x", "does not run on Hopper", "matched ratio 0.81 < 0.9"):
        assert expected in text, expected
    # workload, axes, status, ours, reference, x ref (35 / 0.0421), x ref band (no trials here), floor,
    # latency/floor, A/A, peer, x best peer
    assert cells(text, "11111111") == ["11111111", "seq_len=7", "PASSED", "0.0421", "35.000", "831.35", "–",
                                       "0.0105", "4.01", "1.2", "0.0612 (graph)", "1.45"]
    assert cells(text, "22222222")[2:4] == ["INCORRECT_NUMERICAL", "–"]
    assert cells(text, "22222222")[10] == "RUNTIME_ERROR"
    # Paper beside ours: attention mean of ratios (200 + 200) / 2; the indexer has no rows here.
    assert cells(text, "DSA Sparse Attention")[1:5] == ["181.35x", "unknown (as reported)",
                                                        "arXiv 2608.14560, Table 1", "200.00"]
    assert cells(text, "DSA TopK Indexer")[4] == "not run"
    assert cells(text, "55555555")[5:10] == ["200.00", "–", "nan", "–", "nan"]
    # The failed MoE workload zeroes the contest score even though the passed one is fast.
    # gate passed (all rows), timed passed, contest score, win rate, mean x ref
    assert cells(text, MOE, "ours-v1")[1:7] == ["ours-v1", "1/2", "1/2", "0.00", "0.00", "831.35"]
    assert cells(text, "gpu")[1] == "NVIDIA H200" and cells(text, "commit")[1] == "abc1234"
    assert cells(text, "timing_method")[1] == "cuda-events"
    assert cells(text, "HBM copy bandwidth (TB/s)")[1] == "4.30"
    for definition in (MOE, ATTN):
        png = tmp_path / "out" / "plots" / f"{definition}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert f"(plots/{definition}.png)" in text


def test_report_is_deterministic(results_file, tmp_path):
    a = render_report([results_file], PAPER, tmp_path / "a")
    b = render_report([results_file], PAPER, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    for png in sorted((tmp_path / "a" / "plots").glob("*.png")):
        assert png.read_bytes() == (tmp_path / "b" / "plots" / png.name).read_bytes()


def test_same_row_in_two_files_is_refused(results_file, tmp_path):
    again = tmp_path / "again.json"
    again.write_text(results_file.read_text())
    with pytest.raises(BadInputError, match="also in"):
        render_report([results_file, again], PAPER, tmp_path / "out")


def test_cli_writes_the_report_and_reports_bad_input(results_file, tmp_path):
    runner = cli_runner()
    ok = runner.invoke(report, [str(results_file), "--out", str(tmp_path / "cli"), "--paper", str(PAPER)])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "cli" / "REPORT.md").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "something-else"}))
    failed = runner.invoke(report, [str(bad), "--out", str(tmp_path / "cli2"), "--paper", str(PAPER)])
    assert isinstance(failed.exception, BadInputError) and "fib-sdk.results/1" in str(failed.exception)
    assert runner.invoke(report, ["--paper", str(PAPER)]).exit_code == 2  # neither RESULTS nor --latest


def test_cli_latest_picks_the_newest_results_file(results_file, tmp_path):
    older = tmp_path / "older.json"
    older.write_text(json.dumps(results_doc([])))
    os.utime(older, (1, 1))
    out = cli_runner().invoke(report, ["--latest", "--results-dir", str(tmp_path), "--out", str(tmp_path / "l"),
                                      "--paper", str(PAPER)])
    assert out.exit_code == 0, out.output
    assert "`results.json`" in (tmp_path / "l" / "REPORT.md").read_text()


def test_measured_bound_both_references_and_strict_are_columns(tmp_path):
    """Schema /2 rows: latency over the measured bound, the probe's bandwidth (and as a % of a same-size copy), each
    reference timed, which one the gate graded against, the host time of a call and the strict verdict."""
    measured = row(ATTN, "66666666-ffff", {"num_tokens": 8, "num_pages": 900}, 0.018, 2.0, 0.0045)
    measured.update(bound_ms=0.006, probe={"gb_per_s": 3200.0, "path": "ranges", "pct_of_copy": 84.4},
                    references_ms={"fib-sdk": 1.5, "official": 2.0},
                    reference_source="official", strict_passed=False, host_ms=0.0172)
    doc = {**results_doc([measured]), "schema": "fib-sdk.results/2"}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    text = render_report([path], PAPER, tmp_path / "out").read_text()
    line = cells(text, "66666666")
    for value in ("0.006", "3.00", "3200 (ranges)", "1.500", "official", "FAIL"):
        assert value in line, (value, line)
    assert line[line.index("FAIL") - 1] == "0.0172" and "host ms" in text  # launch-bound when near the latency
    assert line[line.index("3200 (ranges)") + 1] == "84" and "probe % of copy" in text  # the probe against a copy


def test_speedup_band_own_reference_and_bound_summary():
    from sdk.bench import scoring

    row = {"solution": "s", "workload": "w", "status": "PASSED", "latency_ms": 0.2,
           "latency_trials_ms": [0.19, 0.2, 0.21],
           "reference_latency_ms": 20.0, "reference_trials_ms": [15.0, 20.0, 25.0],
           "references_ms": {"official": 20.0, "fib-sdk": 10.0}, "bound_ms": 0.16}
    low, high = scoring.speedup_band(row)
    assert low == pytest.approx(15.0 / 0.21) and high == pytest.approx(25.0 / 0.19)
    assert scoring.speedup_band({**row, "reference_trials_ms": []}) is None
    assert scoring.speedup_band({**row, "status": "INCORRECT_NUMERICAL"}) is None
    slow = {**row, "latency_ms": 0.4, "bound_ms": 0.2}
    s = scoring.summarize_solution([row, slow])
    assert s["mean_speedup_vs_own_reference"] == pytest.approx((10.0 / 0.2 + 10.0 / 0.4) / 2)
    assert s["latency_over_bound"] == {"median": pytest.approx(1.625), "max": 2.0, "n": 2, "within_1_5": 1}
    assert s["mean_speedup_band"][0] == pytest.approx((15.0 / 0.21 + 15.0 / 0.21) / 2)


def test_nox_repro_renders_the_newest_file_of_each_definition():
    pytest.importorskip("nox", reason="nox (the test extra) is not installed: the noxfile cannot be imported")
    noxfile = noxfile_module()
    names = ["nvidia-h200-20261201-repro-moe.json", "nvidia-h200-20261201-repro-attention.json",
             "nvidia-h200-20261201-repro-indexer.json", "nvidia-h200-20261202-repro-indexer.json",
             "nvidia-h200-20261129-repro.json"]
    picked = [p.name for p in noxfile.newest_repro_files([Path(n) for n in names])]
    assert picked == ["nvidia-h200-20261201-repro-attention.json", "nvidia-h200-20261201-repro-moe.json",
                      "nvidia-h200-20261202-repro-indexer.json"]
    whole = [Path("nvidia-h200-20261203-repro.json")] + [Path(n) for n in names]
    assert [p.name for p in noxfile.newest_repro_files(whole)] == ["nvidia-h200-20261203-repro.json"]
