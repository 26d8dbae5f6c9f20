# Throwaway (session 21): the sparse-attention solution copies in .variants/attn_* beside this script (each a
# rendered package of a commit, manifest.txt), against each other on the same inputs: every output graded against
# the reference (contest rule: atol = rtol = 1e-2; strict: relative L2 <= 2%; lse within 1e-2), then the CUPTI span
# of cold-L2 calls (sdk.bench.timing.time_many), 3 interleaved rounds, median. N = 1, 2, 6, 7, 8 (the workloads'
# token counts). The last line names the winner: correct everywhere and the least geomean latency, if that is
# at least 3% under attn_main's; else attn_main. Run from the repository root on the GPU.
import math, os, statistics, subprocess, sys
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, solutions, workloads
from sdk.bench import timing

NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
VARIANTS = Path(__file__).parent / ".variants"


def main():
    definition = definitions.load(NAME)
    wls = workloads.load(NAME)
    dirs = {d.name: d for d in sorted(VARIANTS.glob("attn_*"))}
    build = ("import sys; sys.path.insert(0, '.'); from pathlib import Path; import torch; "
             "from sdk import definitions, solutions, inputs, workloads; "
             f"d = definitions.load('{NAME}'); w = workloads.load('{NAME}')[0]; "
             "fn = solutions.build(solutions.load_package(Path(sys.argv[1])).solution, d); "
             "x = inputs.make_inputs(d, w, seed=1, device='cuda'); "
             "o = torch.empty(1, 16, 512, dtype=torch.bfloat16, device='cuda'); "
             "l = torch.empty(1, 16, device='cuda'); fn(*x.values(), o, l); torch.cuda.synchronize()")
    procs = {k: subprocess.Popen([sys.executable, "-c", build, str(d)]) for k, d in dirs.items()}
    built = {k: p.wait() == 0 for k, p in procs.items()}
    print("built: " + ", ".join(f"{k} {'ok' if ok else 'FAILED'}" for k, ok in built.items()), flush=True)
    fns = {k: solutions.build(solutions.load_package(d).solution, definition) for k, d in dirs.items() if built[k]}
    ref_fn = definitions.reference(NAME)
    correct = {k: True for k in fns}
    lat = {k: [] for k in fns}
    print(f"{'N':>3s} " + " ".join(f"{k:>14s}" for k in fns) + "   (median CUPTI span, us)")
    for n in (1, 2, 6, 7, 8):
        wl = next(w for w in wls if w.axes["num_tokens"] == n)
        x = inputs.make_inputs(definition, wl, seed=21, device="cuda")
        ref_out, ref_lse = ref_fn(*x.values())
        outs, notes = {}, []
        for k, fn in fns.items():
            o = torch.full((n, 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            l = torch.full((n, 16), float("nan"), device="cuda")
            fn(*x.values(), o, l)
            torch.cuda.synchronize()
            outs[k] = (o, l)
            d = (o.float() - ref_out.float()).abs()
            bad = (d > 1e-2) & (d > 1e-2 * ref_out.float().abs())
            rel = ((o.float() - ref_out.float()).norm() / ref_out.float().norm()).item()
            lerr = (l - ref_lse).abs().max().item()
            ok = not bool(bad.any()) and rel <= 0.02 and lerr < 1e-2 and bool(torch.isfinite(o.float()).all())
            correct[k] &= ok
            notes.append(f"{k}: max|d| {d.max().item():.4f} relL2 {rel:.5f} lse {lerr:.2e} {'ok' if ok else 'FAIL'}")
        med = {k: [] for k in fns}
        for rnd in range(3):
            order = list(fns) if rnd % 2 == 0 else list(reversed(fns))
            res = timing.time_many({k: (lambda f=fns[k], oo=outs[k]: f(*x.values(), *oo), 40) for k in order},
                                   "cuda", warmup=5)
            for k in order:
                med[k].append(res[k].median_ms * 1e3)
        for k in fns:
            lat[k].append(statistics.median(med[k]))
        print(f"{n:3d} " + " ".join(f"{lat[k][-1]:14.2f}" for k in fns))
        for line in notes:
            print("     " + line)
        sys.stdout.flush()
    geo = {k: math.exp(statistics.fmean(math.log(v) for v in lat[k])) for k in fns}
    print("geomean us: " + ", ".join(f"{k} {g:.2f} ({g / geo['attn_main']:.3f}x)" for k, g in geo.items()))
    ok = {k: g for k, g in geo.items() if correct[k]}
    best = min(ok, key=ok.get) if ok else "attn_main"
    print("winner", best if ok.get(best, 1e30) <= 0.97 * geo["attn_main"] else "attn_main")


if __name__ == "__main__":
    main()
