"""templates/fused_moe and its rendered solution: rendering, packaging, the routing algorithm, compile, fallback.

The tensor-core kernels themselves (wgmma/TMA grouped GEMMs at every tile configuration, split-K, the whole MoE per
tile) are checked on the GPU by tests/test_kernel_fused_moe_wgmma.py; the `gpu` test below runs the rendered
solution against the definition's reference under the contest tolerance and the strict rule.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
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


# ---- routing: the warp algorithm of route_token_warp, lane by lane --------------------------------------------

def ordered_key(x: float) -> int:
    """moe_routing.cuh's ordered_key of a float32 value (after the kernel's + 0.0f, which makes -0 into +0)."""
    bits = struct.unpack("<I", struct.pack("<f", x + 0.0))[0]
    return (~bits & 0xFFFFFFFF) if bits & 0x80000000 else bits | 0x80000000


def warp_route(logits: torch.Tensor, bias: torch.Tensor) -> list[list[int]]:
    """Mirror of moe_routing.cuh for each token, lane by lane: lane l owns experts 8l..8l+7; xor-merge of per-lane
    top-2; group rank with lower-index tie break; 8 rounds of: each lane's strict arg-max over its keys, the warp's
    max key (redux), the lowest lane holding it (ballot + ffs) clears its key. Returns the picks in round order."""
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
        keys = [[ordered_key(x) if kept[l // 4] else 0 for x in lanes[l]] for l in range(32)]
        chosen = []
        for _ in range(8):
            local = []
            for k in keys:
                bk, bi = 0, 0
                for i, key in enumerate(k):
                    if key > bk:
                        bk, bi = key, i
                local.append((bk, bi))
            top = max(bk for bk, _ in local)
            winner = next(l for l, (bk, _) in enumerate(local) if bk == top)
            keys[winner][local[winner][1]] = 0
            chosen.append(8 * winner + local[winner][1])
        picks.append(chosen)
    return picks


def value_desc_index_asc(logits: torch.Tensor, bias: torch.Tensor) -> list[list[int]]:
    """The selection rule the kernel documents, directly: the kept groups as warp_route keeps them, then the 8
    largest biased scores, ties to the lower expert id (-0 equal to +0)."""
    sb = (1.0 / (1.0 + torch.exp(-logits)) + bias.float()).view(-1, 256)
    out = []
    for tok, row in enumerate(sb.tolist()):
        groups = [sorted(row[32 * g:32 * g + 32], reverse=True) for g in range(8)]
        score = [g[0] + g[1] for g in groups]
        kept = [sum(score[h] > score[g] or (score[h] == score[g] and h < g) for h in range(8)) < 4 for g in range(8)]
        cands = [(row[e] + 0.0, -e) for e in range(256) if kept[e // 32]]
        out.append([-e for _, e in sorted(cands, reverse=True)[:8]])
    return out


def test_warp_routing_algorithm_picks_the_reference_experts():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(64, 256, generator=gen) * 1.5 + torch.randn(1, 256, generator=gen) * 0.75
    bias = (torch.randn(256, generator=gen) * 0.02).to(torch.bfloat16)
    experts, _ = _moe_route()(logits, bias, 2.5)  # the reference's own routing
    assert [set(p) for p in warp_route(logits, bias)] == [set(row) for row in experts.tolist()]


def test_warp_routing_breaks_ties_towards_the_lower_expert():
    # Logits on a coarse grid and a zero bias: many exact ties, within and across lanes and groups; the bias of
    # -0.0 on a zero score makes -0 meet +0. The kernel's rule: value descending, index ascending.
    gen = torch.Generator().manual_seed(11)
    logits = torch.randint(-3, 4, (64, 256), generator=gen).float()
    logits[:8] = 0.0  # every score equal: the picks are the first 8 experts of the first kept groups
    bias = torch.zeros(256, dtype=torch.bfloat16)
    bias[::3] = -0.0
    assert warp_route(logits, bias) == value_desc_index_asc(logits, bias)


# ---- compile (nvcc; the launch unit is torch-free, the torch binding is plain C++ compiled at JIT time) ----------

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: cannot compile-check the kernels")
def test_rendered_launch_unit_compiles_for_sm90a_without_spills(tmp_path):
    cmd = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas", "-v", "-c",
           str(SOURCES / "moe_launch.cu"), "-o", str(tmp_path / "moe_launch.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    log = done.stdout + done.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", log)
    assert len(kernels) >= 8, log[-2000:]  # route, permute, gather, 2 x 2 GEMMs, finish, combine
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

def _require_hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a): the solution's CUDA path is built for it")


@pytest.mark.gpu
def test_cuda_solution_matches_reference_on_gpu():
    _require_hopper()
    from sdk.gate.compare import contest_tolerance, error_stats
    from sdk.gate.strict import RULES

    definition = definitions.load(MOE)
    rule, tol = RULES[MOE], contest_tolerance(MOE)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    # one size per tile plan (swap-AB with split-K, 64-row and 128-row tiles) and the plan boundaries
    for seq in (1, 16, 80, 901, 14107):
        wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == seq)
        args = inputs.make_inputs(definition, wl, seed=0, device="cuda")
        ref = definitions.reference(MOE)(*args.values())
        out = torch.full((seq, 7168), float("nan"), dtype=torch.bfloat16, device="cuda")
        fn(*args.values(), out)
        first = out.clone()
        out.fill_(float("nan"))
        fn(*args.values(), out)
        assert torch.equal(first.view(torch.int16), out.view(torch.int16)), f"T={seq}: two calls differ"
        assert torch.isfinite(out.float()).all(), f"T={seq}: non-finite output"
        stats = error_stats(out, ref, tol)
        print(f"T={seq}: rel L2 {stats['rel_l2']:.3e}, matched {stats['matched_ratio']:.4f}")
        assert stats["rel_l2"] < rule.max_rel_l2, f"T={seq}: relative L2 {stats['rel_l2']:.3e}"
        assert stats["matched_ratio"] >= rule.min_matched_ratio, f"T={seq}: matched {stats['matched_ratio']:.4f}"


@pytest.mark.gpu
def test_cuda_solution_on_extreme_routing_on_gpu():
    """All-local (every token's 8 experts on this rank: 8 T rows, the workspace's worst case), none-local (zero rows:
    the output must be exactly zero) and one hot expert (every token, one group of rows), on each tile plan."""
    _require_hopper()
    from sdk.gate.compare import contest_tolerance, error_stats
    from sdk.gate.strict import RULES

    definition = definitions.load(MOE)
    rule, tol = RULES[MOE], contest_tolerance(MOE)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    for seq in (7, 80, 901):  # swap-AB with split-K; 64-row tiles (the fp32 reference bounds the sizes)
        wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == seq)
        base = inputs.make_inputs(definition, wl, seed=1, device="cuda")
        off = int(base["local_expert_offset"])
        for regime in ("all-local", "none-local", "one-hot"):
            args = dict(base)
            logits = base["routing_logits"].clone()
            if regime == "all-local":
                logits[:, off:off + 32] += 10.0
            elif regime == "none-local":
                logits[:, off:off + 32] -= 10.0
            else:
                logits[:, off + 5] += 10.0
            args["routing_logits"] = logits
            ref = definitions.reference(MOE)(*args.values())
            out = torch.full((seq, 7168), float("nan"), dtype=torch.bfloat16, device="cuda")
            fn(*args.values(), out)
            assert torch.isfinite(out.float()).all(), f"T={seq} {regime}: non-finite output"
            if regime == "none-local":
                assert not ref.float().abs().any() and not out.float().abs().any(), f"T={seq}: no local expert"
                print(f"T={seq} {regime}: zeros")
                continue
            stats = error_stats(out, ref, tol)
            print(f"T={seq} {regime}: rel L2 {stats['rel_l2']:.3e}, matched {stats['matched_ratio']:.4f}")
            assert stats["rel_l2"] < rule.max_rel_l2 and stats["matched_ratio"] >= rule.min_matched_ratio, \
                f"T={seq} {regime}: {stats}"


@pytest.mark.gpu
def test_cuda_solution_launches_the_same_kernels_whatever_the_routing(tmp_path):
    """The launch set depends on shapes only: for each tile plan, the kernels one call launches (names, in order)
    are the same when every token stays local, when none does and for the workload's own routing; the number of
    launches is what the small-T latency is made of, so it is printed."""
    _require_hopper()
    from torch.profiler import ProfilerActivity, profile

    definition = definitions.load(MOE)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    for seq in (1, 7, 80, 901, 11948):
        wl = next(w for w in workloads.load(MOE) if w.axes["seq_len"] == seq)
        base = inputs.make_inputs(definition, wl, seed=2, device="cuda")
        off = int(base["local_expert_offset"])
        out = torch.empty((seq, 7168), dtype=torch.bfloat16, device="cuda")
        launched = {}
        for regime, shift in (("own", 0.0), ("all-local", 10.0), ("none-local", -10.0)):
            args = dict(base)
            args["routing_logits"] = base["routing_logits"].clone()
            args["routing_logits"][:, off:off + 32] += shift
            fn(*args.values(), out)  # built and warm
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn(*args.values(), out)
                torch.cuda.synchronize()
            trace = tmp_path / f"{seq}-{regime}.json"
            prof.export_chrome_trace(str(trace))
            events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "kernel"]
            launched[regime] = [e["name"] for e in sorted(events, key=lambda e: e["ts"])]
        print(f"T={seq}: {len(launched['own'])} launches: {', '.join(n.split('<')[0] for n in launched['own'])}")
        assert launched["own"], f"T={seq}: the profiler saw no kernel"
        assert launched["all-local"] == launched["own"] == launched["none-local"], (seq, launched)
