"""Benchmark reports: REPORT.md with the paper's claims beside ours, per-workload tables and PNG plots."""

__all__ = ["render_report"]


def __getattr__(name: str):
    if name == "render_report":  # imported on first use: `fib-sdk report --help` need not load torch
        from .markdown import render_report

        return render_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
