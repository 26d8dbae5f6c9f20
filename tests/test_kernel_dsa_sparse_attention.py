"""DSA sparse-attention solution: torch fallback vs reference, render reproducibility, CUDA compile checks.

The solution runs through the packaged solution (sdk.solutions.build): the torch fallback on CPU tensors, the
kernels on GPU tensors (the `cuda` cases, `gpu` marker); the kernels are also compile-checked with nvcc (sm_90a, no
spills) when nvcc is present. Outputs are NaN-poisoned before every call and graded with the contest rule
(sdk.gate.compare); the edge cases also check that a second call writes the same bits.
"""
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sdk import definitions, inputs, render, workloads
from sdk.gate.compare import check, contest_tolerance
from sdk.solutions import build, load_package
from tests.helpers import assert_same_bits, call_poisoned, need, on_devices, small_attention

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
PACKAGE = ROOT / "solutions" / "dsa_sparse_attention"
RENDER = tomllib.loads((PACKAGE / "render.toml").read_text())
TOPK = 2048


@pytest.fixture(scope="module")
def solution():
    return build(load_package(PACKAGE).solution, definitions.load(NAME))


def small_inputs(index_rows: torch.Tensor, pages: int, seed: int = 0, device: str = "cpu") -> dict:
    gen = torch.Generator().manual_seed(seed)
    n = index_rows.shape[0]
    randn = lambda *shape: torch.randn(*shape, generator=gen).to(torch.bfloat16).to(device)  # noqa: E731
    return {"q_nope": randn(n, 16, 512), "q_pe": randn(n, 16, 64), "ckv_cache": randn(pages, 64, 512),
            "kpe_cache": randn(pages, 64, 64), "sparse_indices": index_rows.to(torch.int32).to(device),
            "sm_scale": 0.1352337788608801}


def run_solution(fn, x: dict) -> dict:
    workload = small_attention(num_tokens=x["q_nope"].shape[0], num_pages=x["ckv_cache"].shape[0])
    return call_poisoned(fn, NAME, workload, x)   # output and lse NaN-filled before the call


def assert_matches_reference(fn, x: dict) -> dict:
    """One call graded with the contest rule (sdk.gate.compare, contest tolerance); returns its outputs. A token
    without any valid index must be exactly what the reference gives (output 0, lse -inf): the contest's any-inf
    rule would reject that -inf, so those tokens are compared bit for bit and left out of the rule."""
    ref = definitions.reference(NAME)(*x.values())
    outs = run_solution(fn, x)
    empty = (x["sparse_indices"] < 0).all(1)
    for name, got, want in zip(outs, outs.values(), ref):
        assert torch.equal(got[empty], want[empty]), f"{name}: tokens without a valid index differ"
    result = check(NAME, list(outs), [t[~empty] for t in outs.values()], [t[~empty] for t in ref],
                   contest_tolerance(NAME), inputs=x)
    assert result.passed, result.reason
    return outs


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
    out, lse = assert_matches_reference(solution, x).values()
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
TWO_KERNELS = {**RENDER["params"], "MERGE": 0, "PDL": 1}
CLUSTER = {**RENDER["params"], "MERGE": 2}
VARIANTS = [pytest.param(RENDER["params"], id="rendered"),
            pytest.param(FUSED, id="fused-merge-chains2"),
            pytest.param(TWO_KERNELS, id="two-kernels"),
            pytest.param({**CLUSTER, "BLOCK_N": 32, "QK_CHAINS": 2}, id="cluster-block32-chains2"),
            pytest.param({**CLUSTER, "NUM_WARPS": 8}, id="cluster-warps8", marks=SLOW),
            pytest.param({**TWO_KERNELS, "BLOCK_N": 32, "STAGES": 4}, id="block32-stages4", marks=SLOW),
            pytest.param({**TWO_KERNELS, "NUM_WARPS": 8, "PDL": 0}, id="warps8-nopdl", marks=SLOW),
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
    expected = 1 if params["MERGE"] else 2   # one kernel (+ the merge kernel when MERGE = 0)
    assert len(kernels) == expected and len(spills) == expected and len(registers) == expected, proc.stderr
    assert all(s == ("0", "0") for s in spills), proc.stderr
    assert max(registers) <= 255


def edge_indices(case: str, rows: int, gen: torch.Generator) -> torch.Tensor:
    """Index rows [N, 2048] of one edge case over a cache of `rows` rows."""
    def distinct(n: int) -> torch.Tensor:
        return torch.randperm(rows, generator=gen)[:n]

    if case == "pad90_scattered":   # 90% of the slots -1, anywhere in the row
        idx = torch.stack([distinct(TOPK) for _ in range(8)])
        idx[torch.rand(idx.shape, generator=gen) < 0.9] = -1
    elif case == "valid_counts_at_tile_edges":   # a valid prefix of each length, -1 after it
        counts = (1, 15, 63, 64, 65, 129, 1000, 2047)
        idx = torch.full((len(counts), TOPK), -1)
        for r, c in enumerate(counts):
            idx[r, :c] = distinct(c)
    elif case == "token_without_valid_index":
        idx = torch.stack([torch.full((TOPK,), -1), distinct(TOPK)])
    elif case == "duplicated_indices":   # one row 2048 times, 16 rows 128 times, one page, a row's halves equal
        dup = torch.randint(0, rows, (TOPK,), generator=gen)
        dup[TOPK // 2:] = dup[: TOPK // 2]
        one_page = int(distinct(1)) // 64 * 64 + torch.randint(0, 64, (TOPK,), generator=gen)
        idx = torch.stack([torch.full((TOPK,), int(distinct(1))), distinct(16).repeat(TOPK // 16), one_page, dup])
    else:   # tokens_<n>, beyond the workloads' 1..8: fewer splits per token, one split per token at 150
        idx = torch.stack([distinct(TOPK) for _ in range(int(case.removeprefix("tokens_")))])
    return idx


EDGE_CASES = ["pad90_scattered", "valid_counts_at_tile_edges", "token_without_valid_index", "duplicated_indices",
              "tokens_16", "tokens_150"]


@pytest.mark.parametrize("case,device", on_devices(EDGE_CASES, gpu_only={"tokens_150"}))   # fallback: 8 s a call
def test_edge_cases_pass_the_contest_rule_and_repeat_bit_for_bit(solution, case, device):
    need(device)
    pages = 200
    x = small_inputs(edge_indices(case, pages * 64, torch.Generator().manual_seed(7)), pages, seed=7, device=device)
    assert_same_bits(assert_matches_reference(solution, x), run_solution(solution, x))


@pytest.mark.gpu
def test_kernels_match_reference_on_gpu(solution):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the kernels are only compile-checked here")
    definition = definitions.load(NAME)
    for workload in (workloads.load(NAME)[0], workloads.load(NAME)[-1]):   # 1 and 7 tokens
        x = inputs.make_inputs(definition, workload, seed=0, device="cuda")
        assert_same_bits(assert_matches_reference(solution, x), run_solution(solution, x))
