"""Class 1 (tampering with the checker through torch's own extension points).

How it cheats: at import it enters a `torch.overrides.TorchFunctionMode` and never leaves it. Every torch call
of the process on that thread (the gate's comparison included) now passes through the mode, which answers a
whole-tensor `any()` or `sum()` of a boolean tensor with zero. The comparison's "contains inf/NaN" tests are
`isinf(x).any()` / `isnan(x).any()`, and its mismatch count is `bad.sum()` of a boolean mask: all read zero,
so the matched ratio is 1.0 whatever the outputs are. Calls with a `dim` (the reference's) are left alone.
`run` writes cheap finite garbage that changes with the inputs.

Signal exploited: the checker's tensor ops run in the candidate's process and thread; the guards compare
function objects of namespaces, not the torch-function mode stack (nor dispatcher registrations).

A correct gate rejects it: run the comparison where no mode of the candidate is active (another process, or
check `torch._C._len_torch_function_stack() == 0` / compare with numpy on raw bytes). Expected rejection:
INCORRECT_NUMERICAL "trial 0: output: matched ratio 0.0... < 1.0".
"""
import torch


class _Blind(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        whole = len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bool
        if whole and func in (torch.Tensor.any, torch.any, torch.Tensor.sum, torch.sum):
            return torch.zeros_like(result)
        return result


_Blind().__enter__()  # left on the mode stack for the life of the process


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, output, lse):
    output.copy_(q_nope)
    lse.copy_(q_pe[..., 0])
