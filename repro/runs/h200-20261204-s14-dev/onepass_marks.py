# Throwaway (session 14): where the one-pass MoE kernel's time goes (T = 1: 35.8 us for one local expert whose 44 MB
# stream in ~11 us), and whether it beats the kernel chain at T = 7 / 16 when rendered for them (ONEPASS_T_MAX 16).
# %globaltimer marks per CTA in a patched copy of the solution: entry, routed, gathered, past the grid barrier,
# consumer: first GEMM1 item done, GEMM2 rows ready (producer), last GEMM1 item done, consumer done, combine done.
# Run from the repository root on the GPU.
import importlib.util, os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads

spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
s9 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s9)

NAMES = ["entry", "routed", "gathered", "past barrier", "producer: GEMM2 rows ready", "consumer: 1st GEMM1 item",
         "consumer: last GEMM1 item", "consumer: done", "combine done"]
HEAD = """namespace fused_moe {
namespace wg {
__device__ unsigned long long g_marks[160][9];
__device__ __forceinline__ void mark_at(int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (blockIdx.x < 160) g_marks[blockIdx.x][i] = t;
}
}  // namespace wg
}  // namespace fused_moe
"""


def patch(src: str, anchor: str, new: str) -> str:
    assert src.count(anchor) == 1, f"anchor not unique: {anchor!r}"
    return src.replace(anchor, new)


def instrumented_copy(dest: Path, onepass_t_max: int) -> Path:
    shutil.copytree(s9.SOLUTION, dest)
    py = dest / "solution" / "python"
    s = (py / "moe_onepass.cuh").read_text()
    s = patch(s, '#include "moe_wgmma_swap.cuh"\n', '#include "moe_wgmma_swap.cuh"\n' + HEAD)
    s = patch(s, "  constexpr int kProducer = 256;  // thread 0 of the producer warpgroup\n",
              "  constexpr int kProducer = 256;  // thread 0 of the producer warpgroup\n  if (tid == 0) mark_at(0);\n")
    s = patch(s, "  const int rows = R->rows;\n  if (rows == 0) {", "  const int rows = R->rows;\n  if (tid == 0) mark_at(1);\n  if (rows == 0) {")
    s = patch(s, "  cooperative_groups::this_grid().sync();\n",
              "  if (tid == 0) mark_at(2);\n  cooperative_groups::this_grid().sync();\n  if (tid == 0) mark_at(3);\n")
    s = patch(s, "      if (!ready) {\n        wait_rows();\n        prod.flush_pending(true, t, g);\n      }\n",
              "      if (!ready) {\n        wait_rows();\n        prod.flush_pending(true, t, g);\n      }\n"
              "      if (gemm2) mark_at(4);\n")
    s = patch(s, "      if (done) {  // the unit's intermediate is written",
              "      if (tid == 0) { mark_at(6); if (i == blockIdx.x) mark_at(5); }\n      if (done) {  // the unit's intermediate is written")
    s = patch(s, "          combine_8(a.ypart, G2a.partial, s2, rows, R->slot_of + tok * kMaxLocalPerToken, __popc(R->mask[tok]),\n"
                 "                    a.out + static_cast<size_t>(tok) * kHidden, col);\n        }\n",
              "          combine_8(a.ypart, G2a.partial, s2, rows, R->slot_of + tok * kMaxLocalPerToken, __popc(R->mask[tok]),\n"
              "                    a.out + static_cast<size_t>(tok) * kHidden, col);\n        }\n        if (tid == 0) mark_at(8);\n")
    assert s.rstrip().endswith("}  // namespace fused_moe")
    tail = "      sm90::named_barrier_sync(1, 256);  // last2 is rewritten by the next item\n    }\n  }\n}\n"
    s = patch(s, tail, tail[:-2] + "  if (tid == 0) mark_at(7);\n}\n")
    (py / "moe_onepass.cuh").write_text(s)
    launch = (py / "moe_launch.cu").read_text()
    launch = patch(launch, "constexpr int kOnePassTMaxRendered = 1,", f"constexpr int kOnePassTMaxRendered = {onepass_t_max},")
    launch += ("\nvoid moe_read_marks(unsigned long long* host) {\n"
               "  cudaMemcpyFromSymbol(host, fused_moe::wg::g_marks, sizeof(fused_moe::wg::g_marks));\n}\n"
               "void moe_clear_marks() {\n  static unsigned long long zero[160][9];\n"
               "  cudaMemcpyToSymbol(fused_moe::wg::g_marks, zero, sizeof(zero));\n}\n")
    (py / "moe_launch.cu").write_text(launch)
    b = (py / "moe_binding.cpp").read_text()
    b = patch(b, "namespace {\n", "void moe_read_marks(unsigned long long* host);\nvoid moe_clear_marks();\nnamespace {\n")
    b = patch(b, "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n",
              "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
              "  m.def(\"read_marks\", []() { auto t = at::empty({160, 9}, at::kLong);\n"
              "    moe_read_marks(reinterpret_cast<unsigned long long*>(t.data_ptr<int64_t>())); return t; });\n"
              "  m.def(\"clear_marks\", []() { moe_clear_marks(); });\n")
    (py / "moe_binding.cpp").write_text(b)
    # a distinct extension name, so both builds can live in one process
    m = (py / "main.py").read_text()
    (py / "main.py").write_text(patch(m, '"fused_moe_fp8_sm90"', '"fused_moe_fp8_sm90_marks"'))
    return dest


def marks(fn, x, out, calls=5):
    ext = sys.modules[fn.__module__]._EXTENSION
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    per = []
    for _ in range(calls):
        ext.clear_marks()
        flush.zero_()
        torch.cuda.synchronize()
        fn(*x.values(), out)
        torch.cuda.synchronize()
        per.append(ext.read_marks())
    lines = []
    for i, name in enumerate(NAMES):
        vals = []
        for m in per:
            t0 = int(m[:, 0][m[:, 0] > 0].min())
            v = m[:, i]
            v = v[v > 0]
            if v.numel():
                vals.append(((v.min() - t0) / 1e3, (v.double().median() - t0) / 1e3, (v.max() - t0) / 1e3, v.numel()))
        if vals:
            lines.append(f"    {name:>28} min {statistics.median(a for a, *_ in vals):7.2f} median "
                         f"{statistics.median(b for _, b, *_ in vals):7.2f} max {statistics.median(c for *_, c, _ in vals):7.2f} us"
                         f"  ({vals[0][3]} CTAs)")
    return lines


def main():
    definition = definitions.load(s9.MOE)
    fn = solutions.build(solutions.load_package(s9.SOLUTION).solution, definition)
    fn_m = solutions.build(solutions.load_package(instrumented_copy(Path(tempfile.mkdtemp()) / "m", 16)).solution,
                           definition)
    gen = torch.Generator().manual_seed(9)
    wl = {w.axes["seq_len"]: w for w in workloads.load(s9.MOE)}
    base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
    cases = [(f"T=1, {k} local experts", s9.with_local_experts(base, k, gen)) for k in (0, 1, 2, 4)]
    for t, seed in ((7, 9), (7, 101), (14, 9), (16, 9)):
        x = inputs.make_inputs(definition, wl[t], seed=seed, device="cuda")
        cases.append((f"T={t} seed {seed} ({s9.local_count(x)} local experts)", x))
    for label, x in cases:
        T = x["hidden_states"].shape[0]
        out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
        ref = definitions.reference(s9.MOE)(*x.values()).float()
        errs = []
        for f in (fn, fn_m):
            out.fill_(float("nan"))
            f(*x.values(), out)
            torch.cuda.synchronize()
            errs.append(float(((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))))
        _, span = s9.timeline(fn, x, out)
        med, span_m = s9.timeline(fn_m, x, out)
        print(f"{label}: landed {span:.1f} us | one-pass (instrumented) {span_m:.1f} us | rel L2 {errs[0]:.2e} / {errs[1]:.2e}")
        for line in marks(fn_m, x, out):
            print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
