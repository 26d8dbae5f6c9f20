"""The inputs of every call, prepared by the judge (the process that never imports the candidate).

A workload's inputs split in two. *Resident* inputs (MoE weights, the DSA caches: large, and what a real kernel
reads fresh from memory on every call) live in `sets` copies that calls rotate through; before each call one
region the call really reads is re-drawn (`perturb`), so a cache of anything derived from them, keyed on their
identity or on a fingerprint, goes stale and produces wrong numbers. Every other input is *per call*: drawn anew
before each call into one of `slots` slot tensors that calls alternate between, so no call's content repeats an
earlier call's, and a slot's tensors come back at the same addresses with other values.

The candidate's worker gets the *shared* tensors (CUDA IPC or shared memory); the judge keeps a *private* copy
of everything it wrote, and checks against that copy only: nothing the candidate does to the shared tensors can
change the reference's inputs, and any change it made is seen by comparing the two.

Every value is a function of (seed, workload, call index): a run is reproducible from its recorded seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .. import inputs as inputs_mod
from .._fib import Definition, Workload
from . import perturb

# Inputs that stay resident across calls (rotated and perturbed), per definition; the rest are drawn per call.
RESIDENT = {
    "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048": ("gemm1_weights", "gemm2_weights"),
    "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64": ("k_index_cache_fp8",),
    "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64": ("ckv_cache", "kpe_cache"),
}
SET_TRIAL_BASE = 1 << 20  # resident sets draw from trial numbers no call uses


def resident_names(definition: Definition) -> tuple[str, ...]:
    return tuple(n for n in RESIDENT.get(definition.name, ()) if n in definition.inputs)


def clone(values: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _copy_into(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, torch.Tensor):
            dst[k].copy_(v)
        else:
            dst[k] = v


def _bitwise(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.uint8) if t.numel() else t


def same(a: Any, b: Any) -> bool:
    """Bit-for-bit equality for tensors (NaN-safe, fp8-safe), plain equality otherwise."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and \
            torch.equal(_bitwise(a.contiguous()), _bitwise(b.contiguous()))
    return a == b


@dataclass
class Call:
    index: int
    slot: int
    set: int


@dataclass
class InputPool:
    definition: Definition
    workload: Workload
    seed: int
    device: torch.device
    slots: int = 2
    sets: int = 2
    fixed_integers: bool = False  # with a solution `setup()`: a slot's integer inputs stay as setup saw them
    shared_light: list[dict] = field(default_factory=list)
    private_light: list[dict] = field(default_factory=list)
    shared_resident: list[dict] = field(default_factory=list)
    private_resident: list[dict] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.resident = resident_names(self.definition)
        self.light = tuple(n for n in self.definition.inputs if n not in self.resident)
        for s in range(self.sets):
            drawn = self._draw(SET_TRIAL_BASE + s, self.resident) if self.resident else {}
            self.private_resident.append(drawn)
            self.shared_resident.append(clone(drawn))
        for s in range(self.slots):
            drawn = self._draw(s, self.light)
            self.private_light.append(drawn)
            self.shared_light.append(clone(drawn))
            self.outputs.append(inputs_mod.alloc_outputs(self.definition, self.workload, self.device))
        self.calls = 0

    def _draw(self, trial: int, names) -> dict:
        return inputs_mod.make_inputs(self.definition, self.workload, seed=self.seed, trial=trial,
                                      device=self.device, names=names)

    def shared(self, slot: int, set_: int) -> tuple[dict, dict]:
        """(inputs in definition order, outputs) that the worker sees for a call on (slot, set)."""
        values = {**self.shared_light[slot], **self.shared_resident[set_]}
        return {n: values[n] for n in self.definition.inputs}, self.outputs[slot]

    def private(self, call: Call) -> dict:
        values = {**self.private_light[call.slot], **self.private_resident[call.set]}
        return {n: values[n] for n in self.definition.inputs}

    def next_call(self) -> Call:
        """Fresh content for the next call: per-call inputs re-drawn into their slot, one region of the
        resident set re-drawn, outputs poisoned. Every write goes to the private copy and the shared tensors."""
        index = self.calls
        self.calls += 1
        slot = index % self.slots
        # Slot and set advance together, so a call's whole set of tensors comes back every lcm(slots, sets) calls
        # (2): within the contest's 3 gate trials a cache keyed on any pointer is already replayed once.
        set_ = slot % self.sets if self.fixed_integers else index % self.sets
        call = Call(index, slot, set_)
        if index >= self.slots or self.fixed_integers:  # (setup() saw the first draw: its floats are re-drawn)
            fresh = self._draw(index, self.light)
            if self.fixed_integers:  # setup() saw the slot's integers: only float payloads change
                fresh = {k: v for k, v in fresh.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
            _copy_into(self.private_light[slot], fresh)
            _copy_into(self.shared_light[slot], fresh)
        if self.resident:
            gen = torch.Generator(device=self.device).manual_seed(
                inputs_mod.seed_for(self.seed, self.workload.uuid, SET_TRIAL_BASE + (1 << 16) + index))
            perturb.apply(self.definition.name, self.private(call), gen,
                          targets=(self.private_resident[set_], self.shared_resident[set_]))
        for t in self.outputs[slot].values():
            t.fill_(inputs_mod.poison_value(t.dtype))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # visible to the worker's context before it launches
        return call

    def modified_inputs(self, call: Call) -> list[str]:
        """Names of the call's inputs whose shared tensor no longer equals the judge's private copy."""
        shared, _ = self.shared(call.slot, call.set)
        private = self.private(call)
        return [n for n in self.definition.inputs if not same(shared[n], private[n])]

    def output_copy(self, call: Call) -> tuple:
        return tuple(t.clone() for t in self.outputs[call.slot].values())
