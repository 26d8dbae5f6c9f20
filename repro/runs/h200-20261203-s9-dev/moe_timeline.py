# Throwaway (written in session 9 for the next device session): where the small-T MoE call spends its time.
#   A. every kernel of one cold-L2 call (torch.profiler: start offset from the call's first kernel, duration),
#      T = 1 with exactly 0 / 1 / 2 / 4 / 8 local experts, T = 16 and T = 11948 with their own routing; median of
#      5 calls.
#   B. the same calls on a copy of the solution whose swap-AB GEMM kernel writes %globaltimer marks per CTA
#      (entry, after the PDL wait, after the unit table, producer's last TMA issued, consumer's first stage landed,
#      consumer's last k-block, consumer done), GEMM1 and GEMM2 apart: where the ~25 us of GEMM1 go.
# Run from the repository root on the GPU: python3 repro/runs/h200-20261203-s9-dev/moe_timeline.py
import json, os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from sdk import definitions, inputs, solutions, workloads
from sdk.bench.floors import _moe_route

MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
SOLUTION = Path("solutions/fused_moe")
NAMES = ["entry", "pdl wait", "unit table", "last TMA (producer)", "first stage (consumer)", "last k-block", "done"]


def local_count(x) -> int:
    """Distinct local experts the reference's routing picks for the call's tokens."""
    experts, _ = _moe_route()(x["routing_logits"], x["routing_bias"], x["routed_scaling_factor"])
    e = experts.long().flatten() - int(x["local_expert_offset"])
    return len({int(v) for v in e[(e >= 0) & (e < 32)]})


def with_local_experts(x, k: int, gen: torch.Generator):
    """T = 1 inputs whose token routes exactly k of its 8 experts to this rank's 32: the local logits at -10, k of
    them at +10 (k = 8: the eight with the largest bias). For k = 1 the group's second expert must lift the group into the top 4 without being picked
    itself, so its logit is walked down until exactly one local expert is left."""
    off = int(x["local_expert_offset"])
    for _ in range(50):
        logits = x["routing_logits"].clone()
        logits[:, off:off + 32] = -10.0
        pick = torch.randperm(32, generator=gen)[: max(k, 2)].tolist()
        if k == 8:  # all eight local: every other expert far down too, so no other group's bias can outbid
            logits[:] = -10.0
            pick = torch.argsort(x["routing_bias"][off:off + 32].float().cpu(), descending=True)[:8].tolist()
        for e in pick[:k]:
            logits[:, off + e] = 10.0
        y = {**x, "routing_logits": logits}
        if local_count(y) == k:
            return y
        if k == 1:
            for v in torch.linspace(4.0, -4.0, 81).tolist():
                logits[:, off + pick[1]] = v
                if local_count(y) == 1:
                    return y
    raise SystemExit(f"no routing with {k} local experts found")


def timeline(fn, x, out, calls=5):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    rows = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*x.values(), out)
            torch.cuda.synchronize()
        path = Path(tempfile.mkstemp(suffix=".json")[1])
        prof.export_chrome_trace(str(path))
        ev = sorted((e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"),
                    key=lambda e: e["ts"])
        t0 = ev[0]["ts"]
        rows.append([(e["name"].split("<")[0].split("(")[0], e["ts"] - t0, e["dur"]) for e in ev])
    n = len(rows[0])
    med = [(rows[0][i][0], statistics.median(r[i][1] for r in rows), statistics.median(r[i][2] for r in rows))
           for i in range(n)]
    span = statistics.median(max(s + d for _, s, d in r) for r in rows)
    return med, span


PATCH_HEAD = """namespace fused_moe {
namespace wg {
__device__ unsigned long long g_marks[2][160][8];
__device__ __forceinline__ void mark_at(int gemm, int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < 160) g_marks[gemm][blockIdx.x][i] = t;
}
}  // namespace wg
}  // namespace fused_moe
"""
PRODUCER = "if (tid == C::kConsumers * 128) mark_at(C::kSwiGlu ? 0 : 1, %d);\n"
CONSUMER = "if (tid == 0) mark_at(C::kSwiGlu ? 0 : 1, %d);\n"


def instrumented_copy(dest: Path) -> Path:
    shutil.copytree(SOLUTION, dest)
    py = dest / "solution" / "python"
    src = (py / "moe_wgmma_swap.cuh").read_text()
    edits = [  # (anchor, text, before?)
        ("  sm90::pdl_wait();\n  sm90::pdl_launch_dependents();", "  " + PRODUCER % 0, True),
        ("  if (tid < 32) {\n    build_unit_table(", "  " + PRODUCER % 1, True),
        ("  const int splits = table[97], rows_all = table[98];\n", "  " + PRODUCER % 2, False),
        ("      }\n    }\n    return;\n  }\n\n  // ------------------------------------------------------------------ consumers",
         None, None),
        ("  int parity = 0;  // exchange buffer of this unit (SwiGLU)\n", "  bool first_mark = true;\n", False),
        ("      sm90::mbar_wait(full0 + 8 * stage, phase);\n      const float* sfa",
         "      if (first_mark) { first_mark = false; " + CONSUMER.strip() % 4 + " }\n", False),
        ("    // ------------------------------------------------------------------ epilogue\n", "    " + CONSUMER % 5, True),
        ("    }\n  }\n}\n\n}  // namespace wg", None, None),
    ]
    for anchor, text, before in edits:
        assert src.count(anchor) == 1, f"anchor not unique in moe_wgmma_swap.cuh: {anchor!r}"
        if anchor.endswith("consumers"):
            src = src.replace(anchor, anchor.replace("    return;\n", "    " + PRODUCER % 3 + "    return;\n"))
        elif anchor.endswith("namespace wg"):
            src = src.replace(anchor, "    }\n  }\n  " + CONSUMER % 6 + "}\n\n}  // namespace wg")
        elif text.startswith("      if (first_mark)"):
            head = "      sm90::mbar_wait(full0 + 8 * stage, phase);\n"
            src = src.replace(anchor, head + text + anchor[len(head):])
        else:
            src = src.replace(anchor, text + anchor if before else anchor + text)
    src = src.replace('#include "moe_wgmma.cuh"\n', '#include "moe_wgmma.cuh"\n' + PATCH_HEAD, 1)
    (py / "moe_wgmma_swap.cuh").write_text(src)
    launch = (py / "moe_launch.cu").read_text()
    launch += ("\nvoid moe_read_marks(unsigned long long* host) {\n"
               "  cudaMemcpyFromSymbol(host, fused_moe::wg::g_marks, sizeof(fused_moe::wg::g_marks));\n}\n"
               "void moe_clear_marks() {\n  static unsigned long long zero[2][160][8];\n"
               "  cudaMemcpyToSymbol(fused_moe::wg::g_marks, zero, sizeof(zero));\n}\n")
    (py / "moe_launch.cu").write_text(launch)
    binding = (py / "moe_binding.cpp").read_text()
    binding = binding.replace("namespace {\n", "void moe_read_marks(unsigned long long* host);\nvoid moe_clear_marks();\n"
                              "namespace {\n", 1)
    binding = binding.replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                              "  m.def(\"read_marks\", []() { auto t = at::empty({2, 160, 8}, at::kLong);\n"
                              "    moe_read_marks(reinterpret_cast<unsigned long long*>(t.data_ptr<int64_t>())); "
                              "return t; });\n  m.def(\"clear_marks\", []() { moe_clear_marks(); });\n", 1)
    (py / "moe_binding.cpp").write_text(binding)
    return dest


def marks_report(fn, x, out):
    # the instrumented extension, imported by its first call (solutions build lazily)
    ext = sys.modules[fn.__module__]._EXTENSION  # the instrumented extension, built by its first call
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    per_call = []
    for _ in range(5):
        ext.clear_marks()
        flush.zero_()
        torch.cuda.synchronize()
        fn(*x.values(), out)
        torch.cuda.synchronize()
        per_call.append(ext.read_marks())
    lines = []
    if not any(bool((m[0][:, 0] > 0).any()) for m in per_call):
        return ["  (no swap-AB marks: this T runs the row-tile GEMMs)"]
    for gemm in (0, 1):
        cols = []
        for i in range(len(NAMES)):
            vals = []
            for m in per_call:
                if not bool((m[0][:, 0] > 0).any()):
                    continue
                t0 = int(m[0][:, 0][m[0][:, 0] > 0].min())  # GEMM1's first CTA entry of that call
                v = m[gemm][:, i]
                v = v[v > 0]
                if v.numel():
                    vals.append(((v.min() - t0) / 1e3, (v.float().median() - t0) / 1e3, (v.max() - t0) / 1e3))
            if vals:
                cols.append(f"{NAMES[i]:>22} min {statistics.median(a for a, _, _ in vals):7.2f}  "
                            f"median {statistics.median(b for _, b, _ in vals):7.2f}  max {statistics.median(c for _, _, c in vals):7.2f} us")
        lines.append(f"  GEMM{gemm + 1} marks (from GEMM1's first CTA entry; median of 5 calls; CTAs that marked):")
        lines += ["  " + c for c in cols]
    return lines


def main():
    definition = definitions.load(MOE)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    inst_dir = instrumented_copy(Path(tempfile.mkdtemp()) / "fused_moe_marks")
    fn_marks = solutions.build(solutions.load_package(inst_dir).solution, definition)
    gen = torch.Generator().manual_seed(9)
    wl = {w.axes["seq_len"]: w for w in workloads.load(MOE)}
    cases = []
    base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
    for k in (0, 1, 2, 4, 8):
        cases.append((f"T=1, {k} local experts", with_local_experts(base, k, gen)))
    x16 = inputs.make_inputs(definition, wl[16], seed=9, device="cuda")
    cases.append((f"T=16, own routing ({local_count(x16)} local experts)", x16))
    x_big = inputs.make_inputs(definition, wl[11948], seed=9, device="cuda")
    cases.append(("T=11948, own routing (row-tile GEMMs: kernel spans only)", x_big))
    for label, x in cases:
        out = torch.empty((x["hidden_states"].shape[0], 7168), dtype=torch.bfloat16, device="cuda")
        for f in (fn, fn_marks):
            f(*x.values(), out)  # built and warm
        ref = definitions.reference(MOE)(*x.values())
        fn(*x.values(), out)
        err = float((out.float() - ref.float()).abs().max())
        med, span = timeline(fn, x, out)
        print(f"{label}: span {span:.1f} us (median of 5 cold-L2 calls; max |out - ref| {err:.3g})")
        for name, start, dur in med:
            print(f"  {name[:40]:40s} start {start:7.1f}  dur {dur:7.1f}  end {start + dur:7.1f} us")
        for line in marks_report(fn_marks, x, out):
            print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
