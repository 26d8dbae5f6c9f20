"""Class 1 (tampering with a standard-library function the timer uses); GPU-only in effect (needs_gpu).

How it cheats: the computation is honest. At import, `json.load` is replaced (through the alias `_json = json`,
which the scan's monkey-patch rule does not follow) by a wrapper that edits the profiler trace the bench
exports and reads back: for every call annotated "fib-sdk-call-ours-#i" (this solution's timed calls; the
reference's and peers' annotations are left alone), the device events whose launch happened inside that
annotation are squeezed 50x toward the call's first kernel (start offsets and durations). `spans_from_trace`
then measures a span 50x shorter. On CPU the bench never exports a trace, so this package is honest there.

Signal exploited: the CUPTI path round-trips its measurements through a JSON file parsed with the process's own
`json.load`; the guards do not watch `json` (nor `tempfile`, `os`, `statistics`).

A correct gate is immune: parse the trace (or reduce samples) outside the candidate's process, or verify the
stdlib callables the timer uses. Expected: RUNTIME_ERROR "the solution replaced ... json.load", or a latency
equal to the honest baseline's.
"""
import json

import torch

TOPK = 2048
SHRINK = 50.0
MARK = "fib-sdk-call-ours"
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH = {"cuda_runtime", "cuda_driver"}

_json = json
_real_load = json.load


def _squeeze(events):
    xs = [e for e in events if e.get("ph") == "X"]
    calls = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in xs
             if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(MARK)]
    owner = {}  # correlation id -> index of our annotated call that launched it
    for e in xs:
        if e.get("cat") in LAUNCH:
            for i, (begin, end) in enumerate(calls):
                if begin <= e["ts"] <= end:
                    owner[e.get("args", {}).get("correlation")] = i
    groups = {}
    for e in xs:
        if e.get("cat") in DEVICE and e.get("args", {}).get("correlation") in owner:
            groups.setdefault(owner[e["args"]["correlation"]], []).append(e)
    for group in groups.values():
        first = min(e["ts"] for e in group)
        for e in group:
            e["ts"] = first + (e["ts"] - first) / SHRINK
            e["dur"] = e.get("dur", 0) / SHRINK


def _load(fp, *args, **kwargs):
    trace = _real_load(fp, *args, **kwargs)
    if isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list):
        _squeeze(trace["traceEvents"])
    return trace


_json.load = _load


@torch.no_grad()
def _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    """The honest indexer (the project's torch baseline)."""
    B, H, D = q_index_fp8.shape
    P, page = k_index_cache_fp8.shape[:2]
    L = block_table.shape[1] * page
    raw = k_index_cache_fp8.view(torch.uint8).view(P, page * (D + 4))
    pages = block_table.long().clamp(0, P - 1)
    rows = raw[pages.flatten()]
    k = rows[:, : page * D].contiguous().view(torch.float8_e4m3fn).view(B, L, D).float()
    k_scale = rows[:, page * D:].contiguous().view(torch.float32).view(B, L)
    dots = torch.bmm(q_index_fp8.float(), k.transpose(1, 2)) * k_scale[:, None, :]
    score = torch.bmm(weights.float()[:, None, :], dots.clamp_min_(0)).squeeze(1)
    lens = seq_lens.long()
    score.masked_fill_(torch.arange(L, device=score.device)[None, :] >= lens[:, None], float("-inf"))
    k_eff = min(TOPK, L)
    top = score.topk(k_eff, dim=1).indices
    ids = (pages.gather(1, top // page) * page + top % page).int()
    ids.masked_fill_(torch.arange(k_eff, device=ids.device)[None, :] >= lens.clamp(max=TOPK)[:, None], -1)
    topk_indices[:, k_eff:] = -1
    topk_indices[:, :k_eff] = ids


def run(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices):
    _topk(q_index_fp8, k_index_cache_fp8, weights, seq_lens, block_table, topk_indices)
