"""Benchmark reports: REPORT.md with the paper's claims beside ours, per-workload tables and PNG plots."""
from .markdown import render_report

__all__ = ["render_report"]
