"""A Triton kernel that stores far outside its buffer: an illegal memory access (CUDA only)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _store_out_of_bounds(ptr):
    tl.store(ptr + (1 << 40), 1.0)


def scribble(buffer):
    _store_out_of_bounds[(1,)](buffer)
    torch.cuda.synchronize()
