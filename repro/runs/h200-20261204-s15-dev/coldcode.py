# Throwaway (session 15): do our latency-bound kernels pay for fetching their code from DRAM after the judge's
# L2 flush? A. straight-line FFMA kernels of 0.8-66 KB of SASS (and loops with the same dynamic count but
# 1.8 / 17 KB of code), 132 CTAs x 384 threads, %globaltimer entry -> exit per CTA, with and without a 2x L2 flush
# before each launch. B. judge-like CUPTI spans of the landed MoE (T = 1 with 0 / 1 local experts), attention
# (N = 1, 8) and indexer (a long B = 1 row, the largest batch) with and without the flush.
# Run from the repository root on the GPU: python3 repro/runs/h200-20261204-s15-dev/coldcode.py
import ctypes, importlib.util, json, os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from sdk import definitions, inputs, solutions, workloads
from sdk.gate.spans import annotated_spans

HERE = Path(__file__).parent
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")


def part_a():
    so = Path(tempfile.mkdtemp()) / "coldcode.so"
    subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-Xcompiler", "-fPIC", "-shared", "-o",
                    str(so), str(HERE / "coldcode.cu")], check=True)
    lib = ctypes.CDLL(str(so))
    t = torch.zeros(132 * 2, dtype=torch.int64, device="cuda")
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    names = ["N=4 (0.8 KB)", "N=64 (1.7 KB)", "N=256 (4.7 KB)", "N=1024 (17 KB)", "N=4096 (66 KB)",
             "loop 64x64 (1.8 KB, 4096 dyn)", "loop 1024x4 (17 KB, 4096 dyn)"]
    for which, name in enumerate(names):
        for mode in ("warm", "cold"):
            per, span = [], []
            for rep in range(9):
                if mode == "cold":
                    flush.zero_()
                torch.cuda.synchronize()
                rc = lib.launch_code(which, ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(sink.data_ptr()), 132, None)
                assert rc == 0, rc
                torch.cuda.synchronize()
                tt = t.view(132, 2).cpu()
                if rep:
                    per.append(float((tt[:, 1] - tt[:, 0]).max()) / 1e3)
                    span.append(float(tt[:, 1].max() - tt[:, 0].min()) / 1e3)
            print(f"A {name:32s} {mode}: CTA entry->exit max {statistics.median(per):6.2f} us, "
                  f"grid first entry -> last exit {statistics.median(span):6.2f} us")
            sys.stdout.flush()


def spans(thunk, n, do_flush):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            if do_flush:
                flush.zero_()
            torch.cuda.synchronize()
            with record_function(f"c#{i}"):
                thunk()
                torch.cuda.synchronize()
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    prof.export_chrome_trace(str(path))
    got = annotated_spans(json.loads(path.read_text()), "c#")
    path.unlink()
    return [got[f"c#{i}"] * 1e3 for i in range(1, n)]


def compare(label, fn, args):
    fn(*args)
    torch.cuda.synchronize()
    cold = statistics.median(spans(lambda: fn(*args), 21, True))
    warm = statistics.median(spans(lambda: fn(*args), 21, False))
    print(f"B {label:40s} flushed {cold:7.2f} us, no flush {warm:7.2f} us")
    sys.stdout.flush()


def part_b():
    spec = importlib.util.spec_from_file_location("s9", "repro/runs/h200-20261203-s9-dev/moe_timeline.py")
    s9 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s9)
    moe = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
    d = definitions.load(moe)
    fn = solutions.build(solutions.load_package(Path("solutions/fused_moe")).solution, d)
    wl = {w.axes["seq_len"]: w for w in workloads.load(moe)}
    gen = torch.Generator().manual_seed(5)
    x = inputs.make_inputs(d, wl[1], seed=3, device="cuda")
    for k in (0, 1):
        y = s9.with_local_experts(x, k, gen)
        out = torch.empty((1, 7168), dtype=torch.bfloat16, device="cuda")
        compare(f"moe T=1, {k} local", fn, list(y.values()) + [out])
    x = inputs.make_inputs(d, wl[7], seed=3, device="cuda")
    compare("moe T=7", fn, list(x.values()) + [torch.empty((7, 7168), dtype=torch.bfloat16, device="cuda")])

    att = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
    d = definitions.load(att)
    fn = solutions.build(solutions.load_package(Path("solutions/dsa_sparse_attention")).solution, d)
    for n in (1, 8):
        w = next(w for w in workloads.load(att) if w.axes["num_tokens"] == n)
        x = inputs.make_inputs(d, w, seed=3, device="cuda")
        outs = [torch.empty((n, 16, 512), dtype=torch.bfloat16, device="cuda"),
                torch.empty((n, 16), dtype=torch.float32, device="cuda")]
        compare(f"attention N={n}", fn, list(x.values()) + outs)

    idx = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
    d = definitions.load(idx)
    fn = solutions.build(solutions.load_package(Path("solutions/dsa_topk_indexer")).solution, d)
    ws = workloads.load(idx)
    one = max((w for w in ws if w.axes["batch_size"] == 1), key=lambda w: w.axes["max_num_pages"])
    big = max(ws, key=lambda w: w.axes["batch_size"] * w.axes["max_num_pages"])
    for w in (one, big):
        x = inputs.make_inputs(d, w, seed=3, device="cuda")
        out = torch.empty((w.axes["batch_size"], 2048), dtype=torch.int32, device="cuda")
        compare(f"indexer B={w.axes['batch_size']} P={w.axes['max_num_pages']}", fn, list(x.values()) + [out])


if __name__ == "__main__":
    part_a()
    part_b()
