# Throwaway (session 15): where the one-pass MoE kernel's ~7 us from entry to "routed" go (T = 1 with no local
# expert runs 7.5 us against a 2.2 us bound; cold code and cold data are not it: coldcode.py). %globaltimer marks
# per CTA in a patched copy of the landed solution. Run from the repository root on the GPU.
import importlib.util, os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads

spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
s9 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(s9)

NAMES = ["entry", "producer init done", "observe done (tid 0)", "CTA0 zeroed", "routed token (tid 0)",
         "1st syncthreads", "perm done (w0)", "unit tables (w0)", "splits (w0)", "routed (all)", "no-local return",
         "producer past xs wait"]
M = len(NAMES)
HEAD = f"""namespace fused_moe {{
namespace wg {{
__device__ unsigned long long g_marks[160][{M}];
__device__ __forceinline__ void mark_at(int i) {{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
  if (blockIdx.x < 160) g_marks[blockIdx.x][i] = t;
}}
}}  // namespace wg
}}  // namespace fused_moe
"""


def patch(src, anchor, new):
    assert src.count(anchor) == 1, f"anchor not unique: {anchor!r}"
    return src.replace(anchor, new)


def instrumented_copy(dest: Path) -> Path:
    shutil.copytree("solutions/fused_moe", dest)
    py = dest / "solution" / "python"
    s = (py / "moe_onepass.cuh").read_text()
    s = patch(s, '#include "moe_wgmma_swap.cuh"\n', '#include "moe_wgmma_swap.cuh"\n' + HEAD)
    s = patch(s, "  constexpr int kProducer = 256;  // thread 0 of the producer warpgroup\n",
              "  constexpr int kProducer = 256;  // thread 0 of the producer warpgroup\n  if (tid == 0) mark_at(0);\n")
    s = patch(s, "base + L::kOffXs, a.x_scale, kHiddenBlocks * a.route.T * 4, base + L::kOffXsBar);\n",
              "base + L::kOffXs, a.x_scale, kHiddenBlocks * a.route.T * 4, base + L::kOffXsBar);\n    mark_at(1);\n")
    s = patch(s, "bar.observe() : 0u;\n", "bar.observe() : 0u;\n  if (tid == 0 && bar_start != 12345u) mark_at(2);\n")
    s = patch(s, "    for (int i = tid; i < kGemm2Units; i += blockDim.x) a.column_done[i] = 0;\n",
              "    for (int i = tid; i < kGemm2Units; i += blockDim.x) a.column_done[i] = 0;\n    if (tid == 0) mark_at(3);\n")
    s = patch(s, "    if (lane == 0) R->mask[t] = m;\n  }\n  __syncthreads();\n",
              "    if (lane == 0) R->mask[t] = m;\n  }\n  if (threadIdx.x == 0) mark_at(4);\n  __syncthreads();\n"
              "  if (threadIdx.x == 0) mark_at(5);\n")
    s = patch(s, "    __syncwarp();\n    build_unit_table(R->g1,", "    __syncwarp();\n    if (lane == 0) mark_at(6);\n    build_unit_table(R->g1,")
    s = patch(s, "    build_unit_table(R->g2, kOnePassTokens, kGemm2Units, R->table2);\n    __syncwarp();\n",
              "    build_unit_table(R->g2, kOnePassTokens, kGemm2Units, R->table2);\n    __syncwarp();\n    if (lane == 0) mark_at(7);\n")
    s = patch(s, "      R->items2 = R->table2[32] * s2;\n", "      R->items2 = R->table2[32] * s2;\n      mark_at(8);\n")
    s = patch(s, "  const int rows = R->rows;\n", "  const int rows = R->rows;\n  if (tid == 0) mark_at(9);\n")
    s = patch(s, "    if (tid == kProducer) sm90::mbar_wait(base + L::kOffXsBar, 0);",
              "    if (tid == 0) mark_at(10);\n    if (tid == kProducer) { sm90::mbar_wait(base + L::kOffXsBar, 0); mark_at(11); }")
    (py / "moe_onepass.cuh").write_text(s)
    launch = (py / "moe_launch.cu").read_text()
    launch += ("\nvoid moe_read_marks(unsigned long long* host) {\n"
               "  cudaMemcpyFromSymbol(host, fused_moe::wg::g_marks, sizeof(fused_moe::wg::g_marks));\n}\n"
               f"void moe_clear_marks() {{\n  static unsigned long long zero[160][{M}];\n"
               "  cudaMemcpyToSymbol(fused_moe::wg::g_marks, zero, sizeof(zero));\n}\n")
    (py / "moe_launch.cu").write_text(launch)
    b = (py / "moe_binding.cpp").read_text()
    b = patch(b, "namespace {\n", "void moe_read_marks(unsigned long long* host);\nvoid moe_clear_marks();\nnamespace {\n")
    b = patch(b, "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n",
              "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
              f"  m.def(\"read_marks\", []() {{ auto t = at::empty({{160, {M}}}, at::kLong);\n"
              "    moe_read_marks(reinterpret_cast<unsigned long long*>(t.data_ptr<int64_t>())); return t; });\n"
              "  m.def(\"clear_marks\", []() { moe_clear_marks(); });\n")
    (py / "moe_binding.cpp").write_text(b)
    m = (py / "main.py").read_text()
    (py / "main.py").write_text(patch(m, '"fused_moe_fp8_sm90"', '"fused_moe_fp8_sm90_marks"'))
    return dest


def marks(fn, x, out, calls=7):
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
    for i, name in enumerate(NAMES):
        vals = []
        for m in per[1:]:
            t0 = int(m[:, 0][m[:, 0] > 0].min())
            v = m[:, i]
            v = v[v > 0]
            if v.numel():
                vals.append(((v.min() - t0) / 1e3, (v.double().median() - t0) / 1e3, (v.max() - t0) / 1e3, v.numel()))
        if vals:
            print(f"    {name:>24} min {statistics.median(a for a, *_ in vals):7.2f} median "
                  f"{statistics.median(b for _, b, *_ in vals):7.2f} max {statistics.median(c for *_, c, _ in vals):7.2f} us"
                  f"  ({vals[0][3]} CTAs)")


def main():
    definition = definitions.load(s9.MOE)
    fn = solutions.build(solutions.load_package(instrumented_copy(Path(tempfile.mkdtemp()) / "m")).solution, definition)
    gen = torch.Generator().manual_seed(9)
    wl = {w.axes["seq_len"]: w for w in workloads.load(s9.MOE)}
    base = inputs.make_inputs(definition, wl[1], seed=9, device="cuda")
    cases = [(f"T=1, {k} local experts", s9.with_local_experts(base, k, gen)) for k in (0, 1)]
    cases.append(("T=7", inputs.make_inputs(definition, wl[7], seed=9, device="cuda")))
    for label, x in cases:
        T = x["hidden_states"].shape[0]
        out = torch.empty((T, 7168), dtype=torch.bfloat16, device="cuda")
        _, span = s9.timeline(fn, x, out)
        print(f"{label}: instrumented span {span:.1f} us")
        marks(fn, x, out)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
