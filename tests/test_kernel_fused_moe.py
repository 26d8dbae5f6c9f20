"""templates/fused_moe and its rendered solution: rendering, packaging, fragment index layouts, compile, fallback.

The fragment test replays, element by element, what the kernels' cp.async stores (swizzled), ldmatrix loads and
mma.sync operand layouts (as the PTX ISA defines them) do with labelled data, and checks that every MMA multiplies
weights and activations of the same true K index. The GPU checks live in tools/check_fused_moe.py (and the `gpu`
test below).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sdk import definitions, inputs, render, solutions, workloads  # noqa: E402
from sdk.bench.floors import _moe_route  # noqa: E402
from sdk.regenerate import read_render_record  # noqa: E402

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
SOLUTION = ROOT / "solutions" / "fused_moe"
SOURCES = SOLUTION / "solution" / "python"


def rendered_params() -> dict:
    template, params = read_render_record(SOLUTION)
    assert template == "fused_moe"
    return params


# ---- rendering and packaging ------------------------------------------------------------------------------------

def test_render_is_reproducible_and_committed():
    params = rendered_params()
    first = render.render_files("fused_moe", params)
    assert first == render.render_files("fused_moe", params)
    on_disk = {p.name: p.read_text() for p in SOURCES.iterdir() if p.is_file()}
    assert set(first) == set(on_disk), "solution folder holds files the template does not render (or misses some)"
    drift = [name for name, text in first.items() if on_disk[name] != text]
    assert not drift, f"rendered files differ from the committed ones: {drift}"
    assert on_disk["jit_build.py"].split("\n", 2)[2] == (ROOT / "templates" / "common" / "jit_build.py").read_text()


def test_solution_package_is_a_contest_python_solution():
    pkg = solutions.load_package(SOLUTION)
    sol = pkg.solution
    assert (sol.name, sol.definition, sol.author) == ("fib_fused_moe_sm90", MOE, "fib-contest-sdk")
    assert sol.spec.entry_point == "main.py::run" and sol.spec.destination_passing_style
    assert sol.spec.language.value == "python"
    main = (SOURCES / "main.py").read_text()
    assert "from sdk" not in main and "import sdk" not in main
    assert not any(re.search(r"^\s*(from|import) sdk", s.content, re.M) for s in sol.sources)


# ---- fragment layouts (PTX ISA semantics, replayed on labelled elements) ------------------------------------------

def swz(row: int, chunk: int, chunks: int) -> int:
    """Byte offset of 16-byte chunk `chunk` of `row` (moe_common.cuh swz<CHUNKS>)."""
    return (row * chunks + (chunk ^ (row & 7))) * 16


def inter_true_col(p: int) -> int:
    return (p & 7) // 2 * 4 + (p >> 3) * 2 + (p & 1)


def fp8_tile(rows: int, label) -> dict:
    """Smem image of a [rows x 128 B] fp8 tile written chunk-wise through swz<8>: byte -> label(row, k)."""
    mem = {}
    for r in range(rows):
        for ch in range(8):
            for b in range(16):
                mem[swz(r, ch, 8) + b] = label(r, ch * 16 + b)
    return mem


def bf16_tile(rows: int, label) -> dict:
    """[rows x 128 bf16] tile through swz<16>, stored intermediate order: element byte offset -> label(row, k)."""
    mem = {}
    for r in range(rows):
        for ch in range(16):
            for e in range(8):
                p = ch * 8 + e  # stored column
                mem[swz(r, ch, 16) + 2 * e] = label(r, (p // 16) * 16 + inter_true_col(p % 16))
    return mem


def ldmatrix(mem: dict, lane_addr, count: int, elem_bytes: int) -> list:
    """regs[lane][j]: the 4 bytes (fp8: 4 labels; bf16: 2 labels) thread `lane` receives from matrix j."""
    regs = []
    for lane in range(32):
        row_addr = [lane_addr(j * 8 + lane // 4) for j in range(count)]
        regs.append([tuple(mem[a + 4 * (lane % 4) + i] for i in range(0, 4, elem_bytes)) for a in row_addr])
    return regs


def widen(reg):
    return reg[:2], reg[2:]


def mma_operands(a_regs, b_regs, k: int):
    """A[16][k], B[k][8] from per-lane registers (m16n8k32 e4m3: 4 labels/reg; m16n8k16 bf16: 2 labels/reg)."""
    A = [[None] * k for _ in range(16)]
    B = [[None] * 8 for _ in range(k)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        a, b = a_regs[lane], b_regs[lane]
        per = len(a[0])
        for i in range(per):
            A[g][per * t + i], A[g + 8][per * t + i] = a[0][i], a[1][i]
            A[g][k // 2 + per * t + i], A[g + 8][k // 2 + per * t + i] = a[2][i], a[3][i]
            B[per * t + i][g], B[k // 2 + per * t + i][g] = b[0][i], b[1][i]
    return A, B


def assert_same_k(A, B, rows, cols, seen: set):
    for kappa in range(len(B)):
        ks = {A[r][kappa][2] for r in range(16)} | {B[kappa][n][2] for n in range(8)}
        assert len(ks) == 1, f"k index mismatch at kappa {kappa}: {ks}"
        seen.add(ks.pop())
        assert [A[r][kappa][1] for r in range(16)] == rows
        assert [B[kappa][n][1] for n in range(8)] == cols


def test_gemm1_fp8_fragments_pair_weights_and_tokens_by_k():
    """Small GEMM1 (weights = A via x4, tokens = B via x2) and large GEMM1 (tokens = A, weights = B via x4)."""
    w = fp8_tile(32, lambda r, k: ("W", r, k))
    x = fp8_tile(16, lambda r, k: ("X", r, k))
    for m in range(2):  # gemm1_small_kernel::compute
        for n in range(2):
            seen = set()
            for q in range(4):
                a = ldmatrix(w, lambda L: swz(m * 16 + (L & 7) + ((L >> 3) & 1) * 8, 2 * q + (L >> 4), 8), 4, 1)
                b = ldmatrix(x, lambda L: swz(n * 8 + (L & 7), 2 * q + ((L >> 3) & 1), 8), 2, 1)
                A, B = mma_operands(a, b, 32)
                assert_same_k(A, B, list(range(m * 16, m * 16 + 16)), list(range(n * 8, n * 8 + 8)), seen)
            assert seen == set(range(128))
    xa = fp8_tile(32, lambda r, k: ("X", r, k))
    wb = fp8_tile(32, lambda r, k: ("W", r, k))
    for p in range(2):  # gemm1_large_kernel: B via x4 covers n-tiles 2p, 2p+1; A via x4
        seen = {0: set(), 1: set()}
        for q in range(4):
            regs = ldmatrix(wb, lambda L: swz((2 * p + (L >> 4)) * 8 + (L & 7), 2 * q + ((L >> 3) & 1), 8), 4, 1)
            a = ldmatrix(xa, lambda L: swz((L & 7) + ((L >> 3) & 1) * 8, 2 * q + (L >> 4), 8), 4, 1)
            for half in range(2):
                b = [[r[2 * half], r[2 * half + 1]] for r in regs]
                A, B = mma_operands(a, b, 32)
                cols = list(range((2 * p + half) * 8, (2 * p + half) * 8 + 8))
                assert_same_k(A, B, list(range(16)), cols, seen[half])
        assert seen[0] == seen[1] == set(range(128))


def test_gemm2_widened_fp8_and_permuted_bf16_intermediate_pair_by_true_k():
    w = fp8_tile(16, lambda r, k: ("W", r, k))
    c = bf16_tile(16, lambda r, k: ("C", r, k))
    # gemm2_small_kernel: W2 = A (fp8 x4 then widened), intermediate = B (bf16 x4 over 4 stored chunks)
    seen = set()
    for q in range(4):
        r = ldmatrix(w, lambda L: swz((L & 7) + ((L >> 3) & 1) * 8, 2 * q + (L >> 4), 8), 4, 1)
        b = ldmatrix(c, lambda L: swz(L & 7, 4 * q + (L >> 3), 16), 4, 2)
        for s in range(2):
            a = []
            for lane in range(32):
                lo_g, hi_g = widen(r[lane][2 * s])
                lo_g8, hi_g8 = widen(r[lane][2 * s + 1])
                a.append([lo_g, lo_g8, hi_g, hi_g8])
            bb = [[regs[2 * s], regs[2 * s + 1]] for regs in b]
            A, B = mma_operands(a, bb, 16)
            assert_same_k(A, B, list(range(16)), list(range(8)), seen)
    assert seen == set(range(128))
    # gemm2_large_kernel: intermediate = A (bf16 x4), W2 = B (fp8 x4 over n-tiles 2p, 2p+1, widened)
    wb = fp8_tile(16, lambda r, k: ("W", r, k))
    ca = bf16_tile(16, lambda r, k: ("C", r, k))
    for half in range(2):
        seen = set()
        for q in range(4):
            regs = ldmatrix(wb, lambda L: swz((L >> 4) * 8 + (L & 7), 2 * q + ((L >> 3) & 1), 8), 4, 1)
            for s in range(2):
                a = ldmatrix(ca, lambda L: swz((L & 7) + ((L >> 3) & 1) * 8, 4 * q + 2 * s + (L >> 4), 16), 4, 2)
                b = [list(widen(rg[2 * half + s])) for rg in regs]
                A, B = mma_operands(a, b, 16)
                assert_same_k(A, B, list(range(16)), list(range(half * 8, half * 8 + 8)), seen)
        assert seen == set(range(128))


def test_inter_permutation_is_a_bijection_per_16_columns():
    assert sorted(inter_true_col(p) for p in range(16)) == list(range(16))
    text = (ROOT / "templates" / "fused_moe" / "moe_common.cuh").read_text()
    assert "return (p & 7) / 2 * 4 + (p >> 3) * 2 + (p & 1);" in text, "C++ inter_true_col changed: update mirror"


def test_fp8_widening_is_value_times_2_pow_minus_120():
    """widen_e4m3x4's bit moves, on every e4m3 byte (NaN codes excluded)."""
    codes = torch.arange(256, dtype=torch.int32)
    x = ((codes << 8) & 0x8000) | (((codes << 8) >> 4) & 0x07F0)  # one bf16 half: [0, b] -> sign | magnitude >> 4
    got = x.to(torch.int16).view(torch.bfloat16).float() * 2.0 ** 120
    want = codes.to(torch.uint8).view(torch.float8_e4m3fn).float()
    finite = ~torch.isnan(want)
    assert torch.equal(got[finite], want[finite])


# ---- routing: the warp algorithm of route_token_warp, lane by lane --------------------------------------------

def warp_route(logits: torch.Tensor, bias: torch.Tensor) -> list[set]:
    """Mirror of moe_routing.cuh for each token: lane l owns experts 8l..8l+7; xor-merge of per-lane top-2;
    group rank with lower-index tie break; 8 rounds of warp arg-max (value desc, index asc)."""
    s = 1.0 / (1.0 + torch.exp(-logits))
    sb = (s + bias.float()).view(-1, 32, 8)
    picks = []
    for tok in range(sb.shape[0]):
        lanes = sb[tok].tolist()
        m = []
        for v in lanes:  # per-lane top-2 exactly as the kernel's if / else-if
            m1 = m2 = float("-inf")
            for x in v:
                if x > m1:
                    m1, m2 = x, m1
                elif x > m2:
                    m2 = x
            m.append((m1, m2))
        for off in (1, 2):
            m = [(max(a1, m[l ^ off][0]), max(min(a1, m[l ^ off][0]), max(a2, m[l ^ off][1])))
                 for l, (a1, a2) in enumerate(m)]
        score = [m[4 * g][0] + m[4 * g][1] for g in range(8)]
        kept = [sum(score[h] > score[g] or (score[h] == score[g] and h < g) for h in range(8)) < 4 for g in range(8)]
        taken, chosen = set(), set()
        for _ in range(8):
            best = max(((lanes[l][i], -(8 * l + i)) for l in range(32) if kept[l // 4] for i in range(8)
                        if 8 * l + i not in taken))
            taken.add(-best[1])
            chosen.add(-best[1])
        picks.append(chosen)
    return picks


def test_warp_routing_algorithm_picks_the_reference_experts():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(64, 256, generator=gen) * 1.5 + torch.randn(1, 256, generator=gen) * 0.75
    bias = (torch.randn(256, generator=gen) * 0.02).to(torch.bfloat16)
    experts, _ = _moe_route()(logits, bias, 2.5)  # the reference's own routing
    assert warp_route(logits, bias) == [set(row) for row in experts.tolist()]


# ---- compile (nvcc; the launch unit is torch-free, the torch binding is plain C++ compiled at JIT time) ----------

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: cannot compile-check the kernels")
def test_rendered_launch_unit_compiles_for_sm90a_without_spills(tmp_path):
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas", "-v", "-c",
           str(SOURCES / "moe_launch.cu"), "-o", str(tmp_path / "moe_launch.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stdout + done.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) >= 8, log[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == len(kernels) and all(s == ("0", "0") for s in spills), log
    assert not re.search(r"[1-9]\d* bytes stack frame", log), log


# ---- plain-torch fallback ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_fallback_matches_reference_on_cpu():
    """T=2 (the T=1 workload with seq_len 2): the shipped fallback vs the definition's reference, bit-close."""
    definition = definitions.load(MOE)
    base = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == 1)
    wl = base.model_copy(update={"axes": {**base.axes, "seq_len": 2}})
    started = time.time()
    args = inputs.make_inputs(definition, wl, seed=3, device="cpu")
    ref = definitions.reference(MOE)(*args.values())
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    out = torch.full((2, 7168), float("nan"), dtype=torch.bfloat16)
    assert fn(*args.values(), out) is None
    assert torch.isfinite(out.float()).all()
    err = (out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)
    assert float(err) < 1e-5, float(err)
    print(f"fallback T=2 rel L2 {float(err):.2e} in {time.time() - started:.1f} s")


# ---- GPU ----------------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_solution_matches_reference_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA kernels are checked by tools/check_fused_moe.py on the GPU machine")
    definition = definitions.load(MOE)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    for seq in (1, 57, 901):
        wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == seq)
        args = inputs.make_inputs(definition, wl, seed=0, device="cuda")
        ref = definitions.reference(MOE)(*args.values())
        out = torch.full((seq, 7168), float("nan"), dtype=torch.bfloat16, device="cuda")
        fn(*args.values(), out)
        assert torch.isfinite(out.float()).all(), f"T={seq}: non-finite output"
        err = float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))
        assert err < 1e-2, f"T={seq}: relative L2 {err:.3e}"
