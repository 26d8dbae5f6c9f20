"""GPU sanity check of the timing method: CUPTI spans vs CUDA events on ops of known cost (prints a table)."""
import json
import os
import sys

import torch

from sdk.bench.timing import time_call


def main() -> int:
    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1 << 28, device=dev)
    cases = {"bf16 matmul 8192^3": lambda: a @ b, "copy 1 GiB": lambda: x.clone(),
             "3 small kernels": lambda: (x[:1024] + 1).mul_(2).sum(), "empty (no kernel)": lambda: None}
    rows = {}
    for name, fn in cases.items():
        c = time_call(fn, dev, warmup=5, iters=20, method="cupti")
        e = time_call(fn, dev, warmup=5, iters=20, method="events")
        rows[name] = {"cupti_ms": c.median_ms, "cupti_method": c.method, "events_ms": e.median_ms}
        print(f"{name:22s} cupti {c.median_ms:9.4f} ms ({c.method[:10]})  events {e.median_ms:9.4f} ms", flush=True)
    tflops = 2 * 8192 ** 3 / rows["bf16 matmul 8192^3"]["cupti_ms"] / 1e9
    print(f"bf16 matmul rate from the CUPTI span: {tflops:.0f} TFLOP/s")
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "timing_selfcheck.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
