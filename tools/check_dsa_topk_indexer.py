"""GPU check of the DSA top-k indexer solution: contest-rule correctness on every workload and edge case, speed vs
the reference.

    python tools/check_dsa_topk_indexer.py [--quick] [--iters 50] [--timing events|cupti] [--variant CLUSTER=16 ...]

Builds solutions/dsa_topk_indexer through sdk.solutions (its own JIT compile at the first call), then for the 128
official workloads (seeded stand-in inputs, or the blobs when FIB_DATASET_PATH holds them; --quick: 12
representative ones) and extra cases (one 5.8 K-token row, seq_len around page and top-k edges, all-equal and
three-valued K rows, all-negative weights) it runs the solution on poisoned outputs, grades it with the contest
rules (sdk.gate.compare.check_indexer: reachable ids, no duplicates, exact valid count, then sorted fp32 rescored
values at atol = rtol = 1e-2), checks that a second call returns identical ids, and times solution and reference
with sdk.bench.timing (default CUDA events; median of --iters calls, each after an L2-flushing write of twice the
L2 size). Floors: the K-cache bytes of the valid tokens (132 B each) at 4.3 TB/s.
Each --variant renders the template with those parameters changed into a temporary package, builds and checks it
too (about a minute of compilation each). Prints a table; writes $OUT/indexer_check.json (or ./ without OUT).
Exit status 1 when any case fails correctness, 2 without a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sdk import definitions, inputs, render, workloads  # noqa: E402
from sdk.agent.candidate import materialize  # noqa: E402
from sdk.bench.floors import indexer_work  # noqa: E402
from sdk.bench.timing import time_call  # noqa: E402
from sdk.gate.compare import check_indexer, contest_tolerance  # noqa: E402
from sdk.regenerate import read_render_record  # noqa: E402
from sdk.solutions import build, load_package  # noqa: E402

NAME = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
SOLUTION = ROOT / "solutions" / "dsa_topk_indexer"
HBM_BYTES_PER_S = 4.3e12
PAGE = 64
# (batch_size, max_num_pages) of the --quick set: id-only rows (M <= 32) and long rows, B = 1 .. 31.
REPRESENTATIVE = [(1, 1), (1, 3), (8, 8), (30, 32), (4, 45), (8, 45), (31, 43), (12, 82), (15, 91), (27, 82),
                  (29, 91), (30, 91)]


# ---- inputs ---------------------------------------------------------------------------------------------------------

def synthetic_workload(base, uuid: str, batch: int, max_pages: int):
    """A workload like `base` with other axes; its blob paths point nowhere, so the seeded generators run."""
    specs = {name: spec.model_copy(update={"path": f"synthetic/{uuid}.safetensors"}) if spec.type == "safetensors"
             else spec for name, spec in base.inputs.items()}
    axes = {**base.axes, "batch_size": batch, "max_num_pages": max_pages}
    return base.model_copy(update={"uuid": uuid, "axes": axes, "inputs": specs})


def with_token_rows(x: dict, choice: torch.Tensor, gen: torch.Generator) -> dict:
    """Copy of inputs whose every cached token is one of `choice.max() + 1` random token rows (values and scale)."""
    raw = x["k_index_cache_fp8"].view(torch.uint8).view(-1, PAGE * 132).clone()
    pages = raw.shape[0]
    source = torch.randint(0, pages * PAGE, (int(choice.max()) + 1,), generator=gen, device=raw.device)
    values = raw[:, : PAGE * 128].reshape(pages * PAGE, 128)[source]  # [V, 128] fp8 bytes
    scales = raw[:, PAGE * 128:].reshape(pages * PAGE, 4)[source]     # [V, 4] bytes of one fp32
    raw[:, : PAGE * 128] = values[choice].view(pages, PAGE * 128)
    raw[:, PAGE * 128:] = scales[choice].view(pages, PAGE * 4)
    return {**x, "k_index_cache_fp8": raw.view(torch.int8).view(x["k_index_cache_fp8"].shape)}


def extra_cases(definition, base, seed: int, device: str) -> list[tuple[str, object, dict]]:
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    pages = base.axes["num_pages"]
    cases = []
    w = synthetic_workload(base, "synthetic-b1-long", 1, 91)
    cases.append(("b1_long_row", w, inputs.make_inputs(definition, w, seed=seed, device=device)))
    w = synthetic_workload(base, "synthetic-edge-lens", 10, 40)
    x = inputs.make_inputs(definition, w, seed=seed, device=device)
    x["seq_lens"] = torch.tensor([0, 1, 63, 64, 65, 2047, 2048, 2049, 2111, 2560], dtype=torch.int32, device=device)
    cases.append(("edge_seq_lens", w, x))
    w = synthetic_workload(base, "synthetic-ties-equal", 8, 45)
    x = inputs.make_inputs(definition, w, seed=seed, device=device)
    cases.append(("ties_all_equal", w, with_token_rows(x, torch.zeros(pages, PAGE, dtype=torch.long,
                                                                      device=device), gen)))
    w = synthetic_workload(base, "synthetic-ties-three", 30, 91)
    x = inputs.make_inputs(definition, w, seed=seed, device=device)
    three = torch.randint(0, 3, (pages, PAGE), generator=gen, device=device)
    cases.append(("ties_three_rows", w, with_token_rows(x, three, gen)))
    w = synthetic_workload(base, "synthetic-negative-weights", 4, 45)
    x = inputs.make_inputs(definition, w, seed=seed, device=device)
    cases.append(("negative_weights", w, {**x, "weights": -x["weights"].abs()}))
    return cases


# ---- one case -------------------------------------------------------------------------------------------------------

def floor_us(x: dict) -> float:
    """Every valid token's K row (128 fp8 + one fp32 scale) read once from HBM."""
    return indexer_work(x).detail["k_cache_bytes"] / HBM_BYTES_PER_S * 1e6


def check_case(fn, definition, workload, x: dict, ref_ids: torch.Tensor, device: str) -> dict:
    outs = inputs.alloc_outputs(definition, workload, device=device)  # INT_MIN-poisoned
    args = (*x.values(), *outs.values())
    fn(*args)
    synchronize(device)
    result = check_indexer(["topk_indices"], [outs["topk_indices"]], [ref_ids], contest_tolerance(NAME), inputs=x)
    first = outs["topk_indices"].clone()
    outs["topk_indices"].fill_(torch.iinfo(torch.int32).min)
    fn(*args)
    synchronize(device)
    deterministic = torch.equal(first, outs["topk_indices"])
    lens = x["seq_lens"].to(torch.long).clamp(0, workload.axes["max_num_pages"] * PAGE)
    return {"status": result.status, "reason": result.reason, "max_abs": result.max_abs,
            "deterministic": deterministic, "ok": result.passed and deterministic, "args": args,
            "long_rows": int((lens > 2048).sum())}


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def median_us(fn, args: tuple, iters: int, warmup: int, method: str, device: str) -> float:
    return time_call(lambda: fn(*args), device, warmup=warmup, iters=iters, method=method).median_ms * 1e3


# ---- solutions ------------------------------------------------------------------------------------------------------

def parse_variant(text: str) -> dict:
    return {key.strip(): int(value) for key, _, value in (item.partition("=") for item in text.split(",") if item)}


def variant_package(overrides: dict, dest: Path) -> tuple[Path, dict]:
    """The solution's template rendered with `overrides` applied, as a package in `dest`."""
    template, params = read_render_record(SOLUTION)
    params = {**params, **overrides}
    materialize(dest, name=f"indexer_{dest.name}", definition=NAME, template=template, params=params, overlay={},
                templates_root=render.TEMPLATES)
    return dest, params


# ---- main -----------------------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 representative workloads instead of all 128")
    parser.add_argument("--iters", type=int, default=50, help="timed calls of the solution (median)")
    parser.add_argument("--ref-iters", type=int, default=20, help="timed calls of the reference (median)")
    parser.add_argument("--timing", choices=["events", "cupti"], default="events")
    parser.add_argument("--variant", action="append", default=[], help="K=V,... template parameters to override")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of this tool on the torch fallback "
                        "(use with --quick and few iterations)")
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("check_dsa_topk_indexer: needs a CUDA GPU (none visible)")
        return 2
    started = time.perf_counter()
    out_dir = Path(os.environ.get("OUT", "."))
    definition = definitions.load(NAME)
    reference = definitions.reference(NAME)

    official = list(workloads.load(NAME))
    if args.quick:
        by_shape = {(w.axes["batch_size"], w.axes["max_num_pages"]): w for w in official}
        official = [by_shape[s] for s in REPRESENTATIVE if s in by_shape]
    shown = {(b, m) for b, m in REPRESENTATIVE}

    tmp = Path(tempfile.mkdtemp(prefix="indexer_variants_"))
    packages = [(SOLUTION, read_render_record(SOLUTION)[1])]
    packages += [variant_package(parse_variant(v), tmp / f"v{i}") for i, v in enumerate(args.variant)]

    report = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__,
              "timing": args.timing, "iters": args.iters, "ref_iters": args.ref_iters, "solutions": []}
    ref_cache: dict[str, tuple] = {}
    any_fail = False
    for root, params in packages:
        package = load_package(root)
        t0 = time.perf_counter()
        fn = build(package.solution, definition)
        base = official[0]
        first_inputs = inputs.make_inputs(definition, base, seed=args.seed, device=device)
        fn(*first_inputs.values(), *inputs.alloc_outputs(definition, base, device=device).values())  # JIT compile
        synchronize(device)
        entry = {"solution": package.name, "params": params, "first_call_s": round(time.perf_counter() - t0, 1),
                 "cases": []}
        print(f"\n{package.name} {json.dumps(params, sort_keys=True)}: first call (compile) {entry['first_call_s']} s")
        header = (f"{'case':<22}{'B':>3}{'M':>4}{'long':>5}{'ok':>4}{'us':>9}{'ref us':>10}{'speedup':>9}"
                  f"{'floor us':>9}{'x floor':>9}")
        print(header)
        cases = [(w.uuid[:8], w, None, True) for w in official]
        cases += [(name, w, x, False) for name, w, x in extra_cases(definition, base, args.seed, device)]
        for label, workload, x, is_official in cases:
            if x is None:
                x = inputs.make_inputs(definition, workload, seed=args.seed, device=device)
            if workload.uuid not in ref_cache:
                ref_ids = reference(*x.values())[0]
                ref_cache[workload.uuid] = (ref_ids, median_us(reference, tuple(x.values()), args.ref_iters, 2,
                                                               args.timing, device))
            ref_ids, ref_us = ref_cache[workload.uuid]
            r = check_case(fn, definition, workload, x, ref_ids, device)
            case_args = r.pop("args")
            r["us"] = median_us(fn, case_args, args.iters, 10, args.timing, device)
            batch, pages = workload.axes["batch_size"], workload.axes["max_num_pages"]
            r.update(case=label, uuid=workload.uuid, official=is_official, batch=batch, max_pages=pages,
                     ref_us=ref_us, speedup=ref_us / r["us"], floor_us=floor_us(x))
            r["x_floor"] = r["us"] / r["floor_us"] if r["floor_us"] > 0 else None
            any_fail |= not r["ok"]
            entry["cases"].append(r)
            del x, case_args
            if not r["ok"] or not is_official or (batch, pages) in shown:
                print(f"{label:<22}{batch:>3}{pages:>4}{r['long_rows']:>5}{'yes' if r['ok'] else 'NO':>4}"
                      f"{r['us']:>9.2f}{ref_us:>10.0f}{r['speedup']:>9.0f}{r['floor_us']:>9.2f}"
                      f"{(r['x_floor'] or float('nan')):>9.2f}" + ("" if r["ok"] else f"  {r['reason']}"
                                                                 f"{'' if r['deterministic'] else ' (differs)'}"))
        done = [c for c in entry["cases"] if c["official"]]
        large = [c for c in done if c["batch"] >= 25 and c["max_pages"] >= 82]
        entry["summary"] = {
            "all_ok": all(c["ok"] for c in entry["cases"]),
            "failed": [c["case"] for c in entry["cases"] if not c["ok"]],
            "official_cases": len(done),
            "mean_speedup": statistics.mean(c["speedup"] for c in done),
            "mean_us": statistics.mean(c["us"] for c in done),
            "mean_us_id_only": statistics.mean([c["us"] for c in done if c["max_pages"] * PAGE <= 2048] or [0.0]),
            "mean_us_long": statistics.mean([c["us"] for c in done if c["max_pages"] * PAGE > 2048] or [0.0]),
            "max_x_floor_large_batch": max((c["x_floor"] for c in large), default=None),
        }
        s = entry["summary"]
        print(f"all correct: {s['all_ok']}{'' if s['all_ok'] else ' ' + str(s['failed'])}; "
              f"mean speedup {s['mean_speedup']:.0f}x over {s['official_cases']} workloads (target >= 1200); "
              f"mean us {s['mean_us']:.2f} (id-only {s['mean_us_id_only']:.2f}, long {s['mean_us_long']:.2f}); "
              f"large-batch worst {s['max_x_floor_large_batch'] or float('nan'):.2f}x floor (target <= 2)")
        report["solutions"].append(entry)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "indexer_check.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out_dir / 'indexer_check.json'} ({report['wall_s']} s)")
    return 1 if any_fail else 0


if __name__ == "__main__":
    sys.exit(main())
