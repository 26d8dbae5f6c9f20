"""DSA sparse-attention solution: torch fallback vs reference, render reproducibility, CUDA compile checks.

The fallback runs through the packaged solution (sdk.solutions.build) on CPU tensors; the kernels are
compile-checked with nvcc (sm_90a, no spills) when nvcc is present and run against the reference on a GPU.
"""
import importlib.util
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdk import definitions, inputs, render, workloads
from sdk.solutions import build, load_package

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
PACKAGE = ROOT / "solutions" / "dsa_sparse_attention"
RENDER = tomllib.loads((PACKAGE / "render.toml").read_text())


def _check_tool():
    spec = importlib.util.spec_from_file_location("check_dsa_sparse_attention",
                                                  ROOT / "tools" / "check_dsa_sparse_attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = _check_tool()


@pytest.fixture(scope="module")
def solution():
    return build(load_package(PACKAGE).solution, definitions.load(NAME))


def small_inputs(index_rows: torch.Tensor, pages: int, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    n = index_rows.shape[0]
    randn = lambda *shape: torch.randn(*shape, generator=gen).to(torch.bfloat16)  # noqa: E731
    return {"q_nope": randn(n, 16, 512), "q_pe": randn(n, 16, 64), "ckv_cache": randn(pages, 64, 512),
            "kpe_cache": randn(pages, 64, 64), "sparse_indices": index_rows.to(torch.int32),
            "sm_scale": 0.1352337788608801}


def run_solution(fn, x: dict) -> tuple[torch.Tensor, torch.Tensor]:
    n = x["q_nope"].shape[0]
    output = torch.full((n, 16, 512), math.nan, dtype=torch.bfloat16, device=x["q_nope"].device)
    lse = torch.full((n, 16), math.nan, dtype=torch.float32, device=x["q_nope"].device)
    assert fn(*x.values(), output, lse) is None   # destination-passing: results only in the buffers
    return output, lse


def assert_matches_reference(fn, x: dict):
    ref_out, ref_lse = definitions.reference(NAME)(*x.values())
    out, lse = run_solution(fn, x)
    for got, want in ((out, ref_out), (lse, ref_lse)):
        result = CHECK.compare(got, want)
        assert result["ok"], result


def test_compare_applies_the_contest_rule():
    want = torch.tensor([1.0, 100.0, 0.0, -math.inf])
    assert CHECK.compare(torch.tensor([1.009, 100.9, 0.009, -math.inf]), want)["ok"]   # abs or rel <= 1e-2
    for bad in ([1.02, 100.0, 0.0, -math.inf], [1.0, 100.0, math.nan, -math.inf], [1.0, 100.0, 0.0, 0.0]):
        assert not CHECK.compare(torch.tensor(bad), want)["ok"], bad
    assert CHECK.compare(torch.tensor([-math.inf]), torch.tensor([-math.inf]))["has_inf"]


def test_fallback_heavy_padding_duplicates_and_empty_rows(solution):
    pages, rows = 3, 192   # 192 rows for 2048 slots: duplicates everywhere
    gen = torch.Generator().manual_seed(1)
    dense = torch.randint(0, rows, (2048,), generator=gen)
    sparse = torch.randint(0, rows, (2048,), generator=gen)
    sparse[torch.rand(2048, generator=gen) < 0.97] = -1
    empty = torch.full((2048,), -1)
    last_only = torch.full((2048,), -1)
    last_only[-1] = rows - 1
    same_row = torch.full((2048,), 7)
    x = small_inputs(torch.stack([dense, sparse, empty, last_only, same_row]), pages)
    assert_matches_reference(solution, x)
    out, lse = run_solution(solution, x)
    assert torch.all(out[2] == 0) and torch.all(lse[2] == -math.inf)   # no valid index: 0 and -inf
    single = x["ckv_cache"].reshape(-1, 512)[rows - 1]
    assert torch.equal(out[3], single.expand(16, 512))   # one valid row: the output is that row exactly


def test_fallback_on_generated_workload_inputs(solution):
    definition = definitions.load(NAME)
    workload = workloads.load(NAME)[0].model_copy(update={"axes": {"num_tokens": 2, "num_pages": 40}})
    x = inputs.make_inputs(definition, workload, seed=3)
    assert_matches_reference(solution, x)


def test_rendering_is_reproducible_byte_for_byte():
    rendered = render.render_files(RENDER["template"], RENDER["params"])
    source_dir = PACKAGE / "solution" / "python"
    on_disk = {p.name: p.read_text() for p in source_dir.iterdir() if p.is_file()}
    assert set(on_disk) == set(rendered)
    for name, text in rendered.items():
        assert on_disk[name] == text, f"{name} differs from its template: re-render the solution"


def test_package_config():
    solution = load_package(PACKAGE).solution
    assert (solution.name, solution.definition, solution.author) == ("fib_dsa_sparse_attention_sm90", NAME,
                                                                    "fib-contest-sdk")
    assert solution.spec.entry_point == "main.py::run" and solution.spec.destination_passing_style
    assert solution.spec.language.value == "python"
    assert "jit_build.py" in {s.path for s in solution.sources}


SLOW = pytest.mark.slow
FUSED = {**RENDER["params"], "MERGE": 1, "QK_CHAINS": 2}
VARIANTS = [pytest.param(RENDER["params"], id="rendered"),
            pytest.param(FUSED, id="fused-merge-chains2"),
            pytest.param({**RENDER["params"], "BLOCK_N": 32, "STAGES": 4}, id="block32-stages4", marks=SLOW),
            pytest.param({**RENDER["params"], "NUM_WARPS": 8, "PDL": 0}, id="warps8-nopdl", marks=SLOW),
            pytest.param({**FUSED, "BLOCK_N": 32, "STAGES": 4}, id="fused-block32-stages4", marks=SLOW),
            pytest.param({**FUSED, "NUM_WARPS": 8}, id="fused-warps8", marks=SLOW)]


@pytest.mark.parametrize("params", VARIANTS)
def test_kernels_compile_for_sm90a_without_spills(tmp_path, params):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH: cannot compile-check the CUDA sources")
    for name, text in render.render_files(RENDER["template"], params).items():
        (tmp_path / name).write_text(text)
    cmd = [nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas", "-v", "-c",
           str(tmp_path / "dsa_sparse_attention.cu"), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = re.findall(r"Compiling entry function '(\w+)'", proc.stderr)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", proc.stderr)]
    expected = 1 if params["MERGE"] else 2   # split kernel (+ merge kernel unless merged in-kernel)
    assert len(kernels) == expected and len(spills) == expected and len(registers) == expected, proc.stderr
    assert all(s == ("0", "0") for s in spills), proc.stderr
    assert max(registers) <= 255


def test_call_spans_group_own_kernels_between_other_kernels():
    records = [(0, 30, False), (40, 50, True), (52, 60, True), (70, 100, False), (120, 125, True), (5, 6, False)]
    assert CHECK.call_spans_us(records) == [0.02, 0.005]   # ns -> us; gaps between own kernels count


def test_comparison_table_lists_each_build_against_the_default():
    def entry(params, span):
        return {"params": params, "summary": {
            "all_ok": True, "mean_speedup": 60.0, "mean_span_speedup": None if span is None else 100.0,
            "mean_us_by_tokens": {1: 15.0, 8: 19.5}, "mean_span_us_by_tokens": {1: span, 8: span},
            "span_us_by_case": {"pad90_scattered": span, "tokens_16": span}}}
    text = CHECK.comparison_table([entry(RENDER["params"], 10.0), entry(FUSED, None)])
    rows = text.strip().splitlines()
    assert rows[-2].startswith("default") and "10.0 (15.0)" in rows[-2] and "N=16*" in rows[-3]
    assert rows[-1].startswith("MERGE=1,QK_CHAINS=2") and "n/a" in rows[-1]


@pytest.mark.gpu
def test_kernels_match_reference_on_gpu(solution):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the kernels are only compile-checked here")
    definition = definitions.load(NAME)
    for workload in (workloads.load(NAME)[0], workloads.load(NAME)[-1]):   # 1 and 7 tokens
        assert_matches_reference(solution, inputs.make_inputs(definition, workload, seed=0, device="cuda"))
    rows = torch.randint(0, 8 * 64, (3, 2048), device="cuda")
    rows[0] = -1
    rows[1, 5:] = -1
    assert_matches_reference(solution, {k: v.cuda() if isinstance(v, torch.Tensor) else v
                                        for k, v in small_inputs(rows.cpu(), 8).items()})
