"""fib-contest-sdk: definitions, workloads, gate, bench and packaging for the FlashInfer-Bench contest kernels."""

__version__ = "0.1.0"
