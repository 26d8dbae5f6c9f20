"""The bench's timing method on the GPU: CUPTI spans (sdk.bench.timing) against CUDA events on ops of known cost.

A span runs from the call's first kernel start to its last kernel end, so it leaves out the launch that CUDA events
include: never above the events time (plus slack), close to it where the work dwarfs the launch, proportional to
the work, and never faster than any GPU moves bytes or multiplies bf16. A call that launches no device work falls
back to events, labelled as such.
"""
import pytest
import torch

from sdk.bench.timing import CUPTI, EVENTS, time_call

SLACK_MS = 0.01   # event resolution and clock-domain jitter


def span_and_events(fn) -> tuple[float, float]:
    span = time_call(fn, "cuda", warmup=5, iters=20, method="cupti")
    events = time_call(fn, "cuda", warmup=5, iters=20, method="events")
    assert (span.method, events.method) == (CUPTI, EVENTS)
    return span.median_ms, events.median_ms


@pytest.mark.gpu
def test_cupti_span_agrees_with_cuda_events_on_ops_of_known_cost():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: CUPTI spans and CUDA events are compared on the GPU only")
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    x = torch.randn(1 << 28, device="cuda")   # 1 GiB
    half = x[: 1 << 27]
    ms = {"bf16 matmul 8192^3": span_and_events(lambda: a @ b), "copy 1 GiB": span_and_events(x.clone),
          "copy 512 MiB": span_and_events(half.clone),
          "3 small kernels": span_and_events(lambda: (x[:1024] + 1).mul_(2).sum())}
    print("\n" + "\n".join(f"{k:20s} span {s:8.4f} ms  events {e:8.4f} ms" for k, (s, e) in ms.items()))
    for name, (span, events) in ms.items():
        assert span <= events * 1.05 + SLACK_MS, f"{name}: span {span} ms above events {events} ms"
    for name in ("bf16 matmul 8192^3", "copy 1 GiB", "copy 512 MiB"):   # the launch is noise against the work
        span, events = ms[name]
        assert span >= 0.75 * events, f"{name}: span {span} ms, events {events} ms"
    assert 1.6 < ms["copy 1 GiB"][0] / ms["copy 512 MiB"][0] < 2.4   # twice the bytes, twice the span
    assert 2 * 8192 ** 3 / (ms["bf16 matmul 8192^3"][0] * 1e-3) < 5e15   # FLOP/s (H200 dense bf16: 0.99e15)
    assert 2 * (1 << 30) / (ms["copy 1 GiB"][0] * 1e-3) < 2e13            # bytes/s read + written (H200: 4.8e12)
    assert time_call(lambda: None, "cuda", warmup=1, iters=5).method == EVENTS   # no device work: labelled fallback
