# Throwaway (session 13): the one-cluster attention kernel (MERGE = 2: 16 CTAs per token, DSMEM merge) at a few
# tile shapes against the session-5 grid-barrier kernel (MERGE = 1, the committed evidence's point): CUPTI span of
# cold-L2 calls (sdk.bench.timing.time_many), builds interleaved over 3 rounds, N = 1, 2, 6, 8; each variant's
# outputs graded against the reference with the contest rule and the strict 2% relative L2. Run from the repo root.
import os, shutil, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path

import torch

from sdk import definitions, inputs, regenerate, solutions, workloads
from sdk.bench import timing

NAME = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
SOLUTION = Path("solutions/dsa_sparse_attention")
BASE = {"BLOCK_N": 64, "STAGES": 2, "NUM_WARPS": 4, "MAX_SPLITS": 64, "PDL": 1, "QK_CHAINS": 1}
VARIANT_SETS = {
    "cluster": {  # call 2: the cluster kernel's tile shapes
        "grid_m1": {**BASE, "MERGE": 1},
        "cl64w4": {**BASE, "MERGE": 2},
        "cl64w4c2": {**BASE, "MERGE": 2, "QK_CHAINS": 2},
        "cl64w8": {**BASE, "MERGE": 2, "NUM_WARPS": 8},
        "cl32w4c2": {**BASE, "MERGE": 2, "BLOCK_N": 32, "QK_CHAINS": 2},
    },
    "grid": {  # call 5: the grid-barrier kernel's neighbours (more splits, more warps, smaller tiles, two chains)
        "grid_m1": {**BASE, "MERGE": 1},
        "split128": {**BASE, "MERGE": 1, "MAX_SPLITS": 128},
        "w8": {**BASE, "MERGE": 1, "NUM_WARPS": 8},
        "b32s4c2": {**BASE, "MERGE": 1, "BLOCK_N": 32, "STAGES": 4, "QK_CHAINS": 2},
        "c2": {**BASE, "MERGE": 1, "QK_CHAINS": 2},
    },
}
VARIANTS = VARIANT_SETS[sys.argv[1] if len(sys.argv) > 1 else "cluster"]


def variant(key: str, params: dict) -> Path:
    dest = Path(tempfile.mkdtemp()) / f"attn_{key}"
    shutil.copytree(SOLUTION, dest)
    lines = ["template = \"dsa_sparse_attention\"", "", "[params]"] + [f"{k} = {v}" for k, v in params.items()]
    (dest / "render.toml").write_text("\n".join(lines) + "\n")
    regenerate.rewrite(dest)
    return dest


def main():
    definition = definitions.load(NAME)
    wls = workloads.load(NAME)
    dirs = {k: variant(k, v) for k, v in VARIANTS.items()}
    # compile every variant at once (each is its own extension build), then load them here from the cache
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); from pathlib import Path; "
                               "import torch; from sdk import definitions, solutions, inputs, workloads; "
                               f"d = definitions.load('{NAME}'); w = workloads.load('{NAME}')[0]; "
                               "fn = solutions.build(solutions.load_package(Path(sys.argv[1])).solution, d); "
                               "x = inputs.make_inputs(d, w, seed=1, device='cuda'); "
                               "o = torch.empty(1, 16, 512, dtype=torch.bfloat16, device='cuda'); "
                               "l = torch.empty(1, 16, device='cuda'); fn(*x.values(), o, l); "
                               "torch.cuda.synchronize(); print('built', sys.argv[1])", str(d)])
             for d in dirs.values()]
    for p in procs:
        p.wait()
    fns = {k: solutions.build(solutions.load_package(d).solution, definition) for k, d in dirs.items()}
    ref_fn = definitions.reference(NAME)
    print(f"{'N':>3s} " + " ".join(f"{k:>10s}" for k in fns) + "   (median CUPTI span, us)")
    for n in (1, 2, 6, 8):
        wl = next((w for w in wls if w.axes["num_tokens"] == n), None)
        if wl is None:
            continue
        x = inputs.make_inputs(definition, wl, seed=13, device="cuda")
        ref_out, ref_lse = ref_fn(*x.values())
        outs = {}
        notes = []
        for k, fn in fns.items():
            o = torch.full((n, 16, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
            l = torch.full((n, 16), float("nan"), device="cuda")
            fn(*x.values(), o, l)
            torch.cuda.synchronize()
            outs[k] = (o, l)
            err = (o.float() - ref_out.float()).abs().max().item()
            rel = ((o.float() - ref_out.float()).norm() / ref_out.float().norm()).item()
            lerr = (l - ref_lse).abs().max().item()
            ok = err <= 0.01 + 0.01 * ref_out.float().abs().max().item() and rel <= 0.02 and lerr < 1e-2
            notes.append(f"{k}: max|d| {err:.4f} relL2 {rel:.5f} lse {lerr:.2e} {'ok' if ok else 'FAIL'}")
        med = {k: [] for k in fns}
        for rnd in range(3):
            order = list(fns) if rnd % 2 == 0 else list(reversed(fns))
            res = timing.time_many({k: (lambda f=fns[k], oo=outs[k]: f(*x.values(), *oo), 40) for k in order},
                                   "cuda", warmup=5)
            for k in order:
                med[k].append(res[k].median_ms * 1e3)
        print(f"{n:3d} " + " ".join(f"{statistics.median(med[k]):10.2f}" for k in fns))
        for line in notes:
            print("     " + line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
