# Throwaway (session 13): where the one-cluster attention kernel (MERGE = 2: 16 CTAs per token, bulk-copy gathers,
# DSMEM merge) spends its 11.7 us at N = 1 (the grid-barrier kernel: 10.2). A copy of the solution rendered with
# MERGE = 2 whose cluster kernel writes %globaltimer marks per CTA (thread 0): entry, barriers initialised, query
# landed, first tile landed, last tile landed, tiles done, cluster barrier passed, merge done; from the earliest
# entry of the call (min / median / max over CTAs, median of 5 cold-L2 calls), beside the CUPTI span of the
# uninstrumented MERGE = 2 copy. Run from the repository root on the GPU.
import json, os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from sdk import definitions, inputs, regenerate, solutions, workloads

ATTN = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
SOLUTION = Path("solutions/dsa_sparse_attention")
NAMES = ["entry", "barriers initialised", "query landed", "first tile landed", "last tile landed", "tiles done",
         "cluster barrier", "merge done"]
HEAD = """namespace dsa_attn {
__device__ unsigned long long g_marks[1024][8];
__device__ __forceinline__ void mark_at(int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (threadIdx.x == 0 && blockIdx.x < 1024) g_marks[blockIdx.x][i] = t;
}
}  // namespace dsa_attn
"""


def cluster_copy(dest: Path) -> Path:
    shutil.copytree(SOLUTION, dest)
    toml = dest / "render.toml"
    toml.write_text(toml.read_text().replace("MERGE = 1", "MERGE = 2"))
    regenerate.rewrite(dest)
    return dest


def instrumented_copy(dest: Path) -> Path:
    cluster_copy(dest)
    py = dest / "solution" / "python"
    src = (py / "dsa_sparse_attention.cuh").read_text()
    edits = [  # (anchor, inserted text, before the anchor?)
        ("    // This thread's row id first: its round trip overlaps", "    mark_at(0);\n", True),
        ("    __syncthreads();   // the barriers are initialised\n", "    mark_at(1);\n", False),
        ("    mbar_wait(q_bar, 0);\n", "    mark_at(2);\n", False),
        ("        mbar_wait(tile_bar(tile), 0);\n", "        if (tile == 0) mark_at(3);\n"
         "        if (tile == Cfg::kTiles - 1) mark_at(4);\n", False),
        ("    state.finish(sSum, inv, lse);   // its __syncthreads", "    mark_at(5);\n", True),
        ("    cluster_wait_acquire();   // every CTA's partial is written", "", True),
        ("    cluster_wait_acquire();   // no CTA leaves while another", "    mark_at(7);\n", True),
    ]
    for anchor, text, before in edits:
        assert src.count(anchor) == 1, f"anchor not unique: {anchor!r}"
        src = src.replace(anchor, text + anchor if before else anchor + text)
    mid = "    cluster_wait_acquire();   // every CTA's partial is written and visible to the cluster\n"
    assert src.count(mid) == 1
    src = src.replace(mid, mid + "    mark_at(6);\n")
    src = src.replace('#include "sm90_ptx.cuh"\n', '#include "sm90_ptx.cuh"\n' + HEAD, 1)
    (py / "dsa_sparse_attention.cuh").write_text(src)
    unit = (py / "dsa_sparse_attention.cu").read_text()
    unit += ("\nvoid attn_read_marks(unsigned long long* host) {\n"
             "  cudaMemcpyFromSymbol(host, dsa_attn::g_marks, sizeof(dsa_attn::g_marks));\n}\n"
             "void attn_clear_marks() {\n  static unsigned long long zero[1024][8];\n"
             "  cudaMemcpyToSymbol(dsa_attn::g_marks, zero, sizeof(zero));\n}\n")
    (py / "dsa_sparse_attention.cu").write_text(unit)
    binding = (py / "binding.cpp").read_text()
    binding = binding.replace("namespace {\n", "void attn_read_marks(unsigned long long* host);\n"
                              "void attn_clear_marks();\nnamespace {\n", 1)
    binding = binding.replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                              "  m.def(\"read_marks\", []() { auto t = at::empty({1024, 8}, at::kLong);\n"
                              "    attn_read_marks(reinterpret_cast<unsigned long long*>(t.data_ptr<int64_t>())); "
                              "return t; });\n  m.def(\"clear_marks\", []() { attn_clear_marks(); });\n", 1)
    (py / "binding.cpp").write_text(binding)
    return dest


def outputs(n: int) -> list:
    return [torch.empty((n, 16, 512), dtype=torch.bfloat16, device="cuda"),
            torch.empty((n, 16), dtype=torch.float32, device="cuda")]


def span_us(fn, x, calls=5):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    spans = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*x.values(), *outputs(x["q_nope"].shape[0]))
            torch.cuda.synchronize()
        path = Path(tempfile.mkstemp(suffix=".json")[1])
        prof.export_chrome_trace(str(path))
        ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
        spans.append(max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev))
    return statistics.median(spans), len(ev)


def main():
    definition = definitions.load(ATTN)
    fn = solutions.build(solutions.load_package(cluster_copy(Path(tempfile.mkdtemp()) / "plain")).solution,
                         definition)
    fn_marks = solutions.build(solutions.load_package(instrumented_copy(Path(tempfile.mkdtemp()) / "attn")).solution,
                               definition)
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    by_n = {}
    for w in workloads.load(ATTN):
        by_n.setdefault(w.axes["num_tokens"], w)
    for n in sorted(k for k in by_n if k in (1, 2, 8)):
        x = inputs.make_inputs(definition, by_n[n], seed=9, device="cuda")
        out = outputs(n)
        for f in (fn, fn_marks):
            f(*x.values(), *out)  # built and warm
        ext = sys.modules[fn_marks.__module__]._kernels()  # the instrumented extension (lru-cached loader)
        span, kernels = span_us(fn, x)
        per_call = []
        for _ in range(5):
            ext.clear_marks()
            flush.zero_()
            torch.cuda.synchronize()
            fn_marks(*x.values(), *out)
            torch.cuda.synchronize()
            per_call.append(ext.read_marks())
        print(f"N={n}: kernel span {span:.1f} us ({kernels} kernel(s), median of 5 cold-L2 calls); marks from the "
              "call's first CTA entry:")
        for i, name in enumerate(NAMES):
            rows = []
            for m in per_call:
                t0 = int(m[:, 0][m[:, 0] > 0].min())
                v = m[:, i][m[:, i] > 0]
                if v.numel():
                    rows.append(((v.min() - t0) / 1e3, (v.float().median() - t0) / 1e3, (v.max() - t0) / 1e3, v.numel()))
            if rows:
                print(f"  {name:>20} min {statistics.median(r[0] for r in rows):6.2f}  median "
                      f"{statistics.median(r[1] for r in rows):6.2f}  max {statistics.median(r[2] for r in rows):6.2f} us"
                      f"  ({rows[0][3]} CTAs)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
