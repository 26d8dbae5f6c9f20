# Throwaway (written in session 10 for the next device session): where the indexer's long rows spend their 10-24 us.
# A copy of the solution whose score_select_kernel writes %globaltimer marks (thread 0 of each CTA of a long row):
# entry, q and weights loaded, cluster handshake passed, first page landed, pages done, cluster barrier passed,
# rank 0's first select pass done, rank 0 done; printed from the call's earliest mark (min / max over CTAs, median
# of 5 cold-L2 calls), beside the CUPTI span of the unpatched solution on the same inputs. Workloads: long rows at
# a few batch sizes (B x max pages): 4 x 16, 4 x 45, 15 x 91, 30 x 91, 1 long row made from 4 x 45's first row.
# Run from the repository root on the GPU: python3 repro/runs/h200-20261203-s10-dev/indexer_timeline.py
import json, os, shutil, statistics, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from sdk import definitions, inputs, solutions, workloads

INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
SOLUTION = Path("solutions/dsa_topk_indexer")
NAMES = ["entry (long row)", "q + weights loaded", "cluster handshake", "first page landed", "pages done",
         "cluster barrier", "rank 0: first pass", "rank 0: done"]
HEAD = """namespace dsa_indexer {
__device__ unsigned long long g_marks[1024][8];
__device__ __forceinline__ void mark_at(int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0 && cta < 1024) g_marks[cta][i] = t;
}
}  // namespace dsa_indexer
"""


def instrumented_copy(dest: Path) -> Path:
    shutil.copytree(SOLUTION, dest)
    py = dest / "solution" / "python"
    src = (py / "indexer.cuh").read_text()
    edits = [  # (anchor, inserted text, before the anchor?)
        ("  uint8_t* rings = smem;  // the reused region\n", "  mark_at(0);\n", True),
        ("  cluster_wait_acquire();\n\n  for (int i = 0; i < group_pages; ++i) {\n", "  mark_at(1);\n", True),
        ("    const uint8_t* stage = ring + (i % STAGES) * kPageBytes;\n", "    if (i == 0) mark_at(3);\n", True),
        ("  cp_async_wait<0>();  // only empty groups can remain\n", "  mark_at(4);\n", False),
        ("  if (rank != 0) return;\n", "  mark_at(5);\n", True),
        ("  // The `need` best candidates fill out[above_digit, 2048).\n", "  mark_at(6);\n", True),
        ("    rank_candidates<kThreads>(cand_keys, cand_pos, m, need, bt_row, tail);\n", "    mark_at(7);\n", False),
    ]
    for anchor, text, before in edits:
        assert src.count(anchor) == 1, f"anchor not unique: {anchor!r}"
        src = src.replace(anchor, text + anchor if before else anchor + text)
    # the handshake: after the first cluster_wait_acquire (the one right before the page loop)
    loop = "  cluster_wait_acquire();\n\n  for (int i = 0; i < group_pages; ++i) {\n"
    src = src.replace(loop, loop.replace("  cluster_wait_acquire();\n", "  cluster_wait_acquire();\n  mark_at(2);\n"))
    end = "                          tail, [cand_pos](int i) { return static_cast<int>(cand_pos[i]); });\n"
    assert src.count(end) == 1, "end anchor"
    src = src.replace(end, end + "  mark_at(7);\n")
    src = src.replace('#include "sm90_ptx.cuh"\n', '#include "sm90_ptx.cuh"\n' + HEAD, 1)
    (py / "indexer.cuh").write_text(src)
    unit = (py / "indexer_launch.cu").read_text()
    unit += ("\nvoid indexer_read_marks(unsigned long long* host) {\n"
             "  cudaMemcpyFromSymbol(host, dsa_indexer::g_marks, sizeof(dsa_indexer::g_marks));\n}\n"
             "void indexer_clear_marks() {\n  static unsigned long long zero[1024][8];\n"
             "  cudaMemcpyToSymbol(dsa_indexer::g_marks, zero, sizeof(zero));\n}\n")
    (py / "indexer_launch.cu").write_text(unit)
    binding = (py / "binding.cpp").read_text()
    binding = binding.replace("namespace {\n", "void indexer_read_marks(unsigned long long* host);\n"
                              "void indexer_clear_marks();\nnamespace {\n", 1)
    binding = binding.replace("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n", "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                              "  m.def(\"read_marks\", []() { auto t = at::empty({1024, 8}, at::kLong);\n"
                              "    indexer_read_marks(reinterpret_cast<unsigned long long*>(t.data_ptr<int64_t>())); "
                              "return t; });\n  m.def(\"clear_marks\", []() { indexer_clear_marks(); });\n", 1)
    (py / "binding.cpp").write_text(binding)
    return dest


def outputs(x) -> list:
    return [torch.empty((x["block_table"].shape[0], 2048), dtype=torch.int32, device="cuda")]


def span_us(fn, x, calls=5):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    spans = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*x.values(), *outputs(x))
            torch.cuda.synchronize()
        path = Path(tempfile.mkstemp(suffix=".json")[1])
        prof.export_chrome_trace(str(path))
        ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
        spans.append(max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev))
    return statistics.median(spans), len(ev)


def main():
    definition = definitions.load(INDEXER)
    fn = solutions.build(solutions.load_package(SOLUTION).solution, definition)
    fn_marks = solutions.build(solutions.load_package(instrumented_copy(Path(tempfile.mkdtemp()) / "idx")).solution,
                               definition)
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    by_shape = {}
    for w in workloads.load(INDEXER):
        by_shape.setdefault((w.axes["batch_size"], w.axes["max_num_pages"]), w)
    cases = []
    for shape in ((4, 16), (4, 45), (15, 91), (30, 91)):
        if shape in by_shape:
            cases.append((f"B={shape[0]} x {shape[1]} pages", inputs.make_inputs(definition, by_shape[shape], seed=9,
                                                                                  device="cuda")))
    if (4, 45) in by_shape:  # one long row: the first row of 4 x 45 alone
        x = inputs.make_inputs(definition, by_shape[(4, 45)], seed=9, device="cuda")
        cases.append(("B=1 (4 x 45's first row)", {k: (v[:1] if k in ("q_index_fp8", "weights", "seq_lens",
                                                                       "block_table") else v) for k, v in x.items()}))
    for label, x in cases:
        out = outputs(x)
        for f in (fn, fn_marks):
            f(*x.values(), *out)  # built and warm
        ext = sys.modules[fn_marks.__module__]._cuda_extension()  # the instrumented extension
        span, kernels = span_us(fn, x)
        seq = x["seq_lens"].tolist()
        per_call = []
        for _ in range(5):
            ext.clear_marks()
            flush.zero_()
            torch.cuda.synchronize()
            fn_marks(*x.values(), *out)
            torch.cuda.synchronize()
            per_call.append(ext.read_marks())
        print(f"{label} (seq_lens {min(seq)}..{max(seq)}): span {span:.1f} us ({kernels} kernel(s), median of 5 "
              "cold-L2 calls); marks from the call's earliest mark:")
        for i, name in enumerate(NAMES):
            rows = []
            for m in per_call:
                if not bool((m > 0).any()):
                    continue  # no long row in this batch: the marked kernel path did not run
                t0 = int(m[m > 0].min())
                v = m[:, i][m[:, i] > 0]
                if v.numel():
                    rows.append(((int(v.min()) - t0) / 1e3, (int(v.max()) - t0) / 1e3, v.numel()))
            if rows:
                print(f"  {name:>22} min {statistics.median(r[0] for r in rows):6.2f}  max "
                      f"{statistics.median(r[1] for r in rows):6.2f} us  ({rows[0][2]} CTAs)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
