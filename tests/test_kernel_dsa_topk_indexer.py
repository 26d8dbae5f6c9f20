"""DSA top-k indexer solution: torch fallback vs the reference under the contest rules, render reproducibility,
sm_90a compile checks, and the GPU kernels against the reference when a GPU is present.

The fallback runs through the packaged solution (sdk.solutions.build) on CPU tensors with small caches; grading
is sdk.gate.compare.check_indexer (reachable ids, no duplicates, exact valid count, sorted rescored values).
"""
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import INDEXER, small_indexer

from sdk import definitions, inputs, render
from sdk.gate.compare import check_indexer, contest_tolerance
from sdk.regenerate import expected_files, read_render_record, source_dir
from sdk.solutions import build, load_package

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "solutions" / "dsa_topk_indexer"
TEMPLATE, PARAMS = read_render_record(PACKAGE)


def _check_tool():
    path = ROOT / "tools" / "check_dsa_topk_indexer.py"
    spec = importlib.util.spec_from_file_location("check_dsa_topk_indexer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def solution():
    return build(load_package(PACKAGE).solution, definitions.load(INDEXER))


def run_and_grade(fn, workload, x: dict):
    """Runs the solution on INT_MIN-poisoned outputs and grades it against the reference; returns the ids."""
    definition = definitions.load(INDEXER)
    outs = inputs.alloc_outputs(definition, workload, device=x["q_index_fp8"].device)
    assert fn(*x.values(), *outs.values()) is None   # destination-passing: results only in the buffer
    ids = outs["topk_indices"]
    ref = definitions.reference(INDEXER)(*x.values())[0]
    result = check_indexer(["topk_indices"], [ids], [ref], contest_tolerance(INDEXER), inputs=x)
    assert result.passed, result.reason
    return ids


@pytest.mark.parametrize("batch,max_pages,num_pages", [(3, 40, 200), (2, 5, 16), (4, 91, 400), (1, 33, 40)])
def test_fallback_matches_reference(solution, batch, max_pages, num_pages):
    workload = small_indexer(f"fallback-{batch}-{max_pages}", batch, max_pages, num_pages)
    x = inputs.make_inputs(definitions.load(INDEXER), workload, seed=1)
    ids = run_and_grade(solution, workload, x)
    lens = x["seq_lens"].to(torch.long)
    assert torch.equal((ids >= 0).sum(1), lens.clamp(max=2048))   # padding only after the valid count


def test_fallback_seq_lens_at_page_and_topk_edges(solution):
    workload = small_indexer("fallback-edges", 10, 40, 400)
    x = inputs.make_inputs(definitions.load(INDEXER), workload, seed=2)
    x["seq_lens"] = torch.tensor([0, 1, 63, 64, 65, 2047, 2048, 2049, 2111, 2560], dtype=torch.int32)
    ids = run_and_grade(solution, workload, x)
    assert torch.all(ids[0] == -1)
    first_page = int(x["block_table"][3, 0]) * 64   # row 3 (64 tokens) keeps exactly its first page
    assert torch.equal(ids[3, :64].sort().values, first_page + torch.arange(64, dtype=torch.int32))
    assert torch.all(ids[3, 64:] == -1)


def test_fallback_with_every_score_tied(solution):
    workload = small_indexer("fallback-ties", 3, 45, 150)
    x = inputs.make_inputs(definitions.load(INDEXER), workload, seed=3)
    gen = torch.Generator().manual_seed(0)
    x = _check_tool().with_token_rows(x, torch.zeros(150, 64, dtype=torch.long), gen)
    raw = x["k_index_cache_fp8"].view(torch.uint8).view(150, -1)
    assert torch.all(raw == raw[:1])   # every cached token is the same row (values and scale)
    run_and_grade(solution, workload, x)


def test_check_tool_builds_synthetic_workloads():
    tool = _check_tool()
    base = small_indexer("base", 3, 40, 200)
    w = tool.synthetic_workload(base, "synthetic-x", 1, 91)
    assert (w.uuid, w.axes["batch_size"], w.axes["max_num_pages"]) == ("synthetic-x", 1, 91)
    blobs = [s.path for s in w.inputs.values() if s.type == "safetensors"]
    assert blobs and all(p.startswith("synthetic/") for p in blobs)   # never a real blob of another shape
    assert tool.parse_variant("CLUSTER=16,STAGES=3") == {"CLUSTER": 16, "STAGES": 3}


def test_rendering_is_reproducible_byte_for_byte():
    expected = expected_files(PACKAGE)
    folder = source_dir(PACKAGE)
    assert {p.name for p in folder.iterdir() if p.is_file()} == {p.name for p in expected}
    for path, text in expected.items():
        assert path.read_bytes() == text.encode(), f"{path.name} differs from its template: re-render the solution"


def test_package_config():
    solution = load_package(PACKAGE).solution
    assert (solution.name, solution.definition, solution.author) == ("fib_dsa_topk_indexer_sm90", INDEXER,
                                                                    "fib-contest-sdk")
    assert solution.spec.entry_point == "main.py::run" and solution.spec.destination_passing_style
    assert solution.spec.language.value == "python" and solution.spec.binding == "torch"
    assert {"jit_build.py", "indexer.cuh", "indexer_launch.cu", "binding.cpp"} <= {s.path for s in solution.sources}


SLOW = pytest.mark.slow
VARIANTS = [pytest.param(PARAMS, id="rendered"),
            pytest.param({**PARAMS, "HEAD_SPLIT": 4, "STAGES": 6, "CLUSTER": 16}, id="split4-stages6-cluster16",
                         marks=SLOW),
            pytest.param({**PARAMS, "STAGES": 2, "CLUSTER": 4}, id="stages2-cluster4", marks=SLOW)]


@pytest.mark.parametrize("params", VARIANTS)
def test_kernels_compile_for_sm90a_without_spills(tmp_path, params):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH: cannot compile-check the CUDA sources")
    for name, text in render.render_files(TEMPLATE, params).items():
        (tmp_path / name).write_text(text)
    cmd = [nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas", "-v", "-c",
           str(tmp_path / "indexer_launch.cu"), "-o", str(tmp_path / "k.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = re.findall(r"Compiling entry function '(\w+)'", proc.stderr)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", proc.stderr)]
    assert len(kernels) == 2 and len(spills) == 2 and len(registers) == 2, proc.stderr
    assert all(s == ("0", "0") for s in spills), proc.stderr
    fused = registers[next(i for i, k in enumerate(kernels) if "score_select" in k)]
    assert fused <= (128 if params["HEAD_SPLIT"] == 2 else 255)   # HEAD_SPLIT 2: two CTAs of 256 threads per SM


@pytest.mark.gpu
def test_kernels_match_reference_on_gpu(solution):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the kernels are only compile-checked here")
    definition = definitions.load(INDEXER)
    for batch, max_pages in ((4, 20), (3, 91), (30, 45)):   # id-only kernel, long rows, many clusters
        workload = small_indexer(f"gpu-{batch}-{max_pages}", batch, max_pages, 3000)
        x = inputs.make_inputs(definition, workload, seed=4, device="cuda")
        first = run_and_grade(solution, workload, x).clone()
        assert torch.equal(first, run_and_grade(solution, workload, x))   # deterministic, ties included
    workload = small_indexer("gpu-ties", 8, 45, 400)
    x = inputs.make_inputs(definition, workload, seed=5, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    run_and_grade(solution, workload, _check_tool().with_token_rows(
        x, torch.zeros(400, 64, dtype=torch.long, device="cuda"), gen))
