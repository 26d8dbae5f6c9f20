"""Where candidates run while several are in flight: one gate at a time per GPU, a bounded number of compiles.

`DevicePool` hands out one device per gate or bench call and blocks the next caller until one is free, so
timings never share a GPU; without a GPU it has a single CPU slot (CPU gating of the torch fallback).
"""
from __future__ import annotations

import queue
import threading
from contextlib import contextmanager


class DevicePool:
    def __init__(self, devices: list[str]):
        self.devices = list(devices) or ["cpu"]
        self._free: queue.Queue = queue.Queue()
        for device in self.devices:
            self._free.put(device)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d != "cpu"]

    @contextmanager
    def acquire(self):
        """A device name; with one GPU (or none) it is None: the gate then picks its default device."""
        device = self._free.get()
        try:
            yield device if len(self.gpus) > 1 else None
        finally:
            self._free.put(device)


class CompileSlots:
    def __init__(self, jobs: int):
        self._sem = threading.BoundedSemaphore(max(1, jobs))

    @contextmanager
    def acquire(self):
        with self._sem:
            yield
