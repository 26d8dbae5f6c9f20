"""MoE peers: two FP8 block-scale grouped GEMMs from third-party libraries inside the same unfused torch pipeline.

Per call (glue.moe_forward): routing exactly as the reference (torch), permutation of local assignments into
per-expert segments aligned to the GEMM's M tile (one host sync for the row count, as with any dispatch that sizes
buffers on the host), GEMM1, SwiGLU with SiLU on the SECOND half (the reference's order; done in torch, so W13 needs
no permutation), requantisation to FP8 1x128, GEMM2, weighted combine in fp32 to bf16. The weights and their
[G, N/128, K/128] fp32 scales are used as given (both GEMMs take [E, N, K] weights), so prepare converts nothing;
that also keeps the peers correct when the gate re-draws part of a weight set between calls.

DeepGemmMoe. DeepGEMM API as read from the sgl-deep-gemm 0.1.5.post1 wheel (deep_gemm/__init__.py,
deep_gemm/utils/layout.py; checks in deep_gemm/_C.so, matching sgl-project/DeepGEMM csrc/apis/gemm.hpp and
layout.hpp):
  m_grouped_fp8_gemm_nt_contiguous((a [M, K] fp8, sfa [M, K/128] f32), (b [G, N, K] fp8, sfb [G, N/128, K/128] f32),
      d [M, N] bf16, grouped_layout [M] int32 (expert per row, -1 on padding rows)); SM90 turns an FP32 (1, 128)
      SFA into the MN-major TMA-aligned layout (a no-op when it already is), keeps the (128, 128) SFB as is.
  get_mk_alignment_for_contiguous_layout() -> the per-expert row alignment (128).
Rows are gathered (hidden states and their scales) before GEMM1.

SglangTritonMoe. sglang 0.5.16's Triton `fused_moe_kernel` (sglang/kernels/ops/moe/fused_moe_triton_kernels.py,
the kernel sglang's and vLLM's fused_experts launch), fp8_w8a8 with block_shape [128, 128], launched directly twice
(as sglang's fused_experts does, minus its own activation quantisation, which would re-quantise the already-FP8
hidden states): rows are read through sorted_token_ids (no gather: GEMM1 reads the hidden states and the [H/128, T]
scales in place through strides), one expert per BLOCK_SIZE_M rows (expert_ids), output in sorted order
(c_sorted). Block sizes come from vLLM 0.26.0's tuned file for exactly this slice,
fused_moe/configs/E=32,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json (sglang ships
none for E=32,N=2048 on H200 and would fall back to its default config): the entry whose batch size is nearest
T, as sglang and vLLM pick it, for both GEMMs, with BLOCK_SIZE_K capped at the 128-column scale block as vLLM caps
it (the kernel reads one activation scale per BLOCK_SIZE_K step; the file asks for 256 at T >= 1792). swap_ab is
sglang's own rule (should_enable_swap_ab: SM90, BLOCK_SIZE_M < 64). The module is executed from the trimmed wheel
with its few sglang.srt imports stubbed (load_file_with_stubs; nothing enters sys.modules but the module itself).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Callable

import torch

from . import Outputs, Peer, _first_line, load_file_with_stubs
from .glue import BLOCK, moe_forward, route_and_permute
from .repack import SGLANG_MOE_KERNELS, VLLM_MOE_CONFIGS

DEFINITION = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
SGLANG_VERSION, VLLM_VERSION = "0.5.16", "0.26.0"
LOCAL_EXPERTS, INTERMEDIATE = 32, 2048


def _host_scalars(inputs: dict) -> dict:
    """The inputs with the scalar tensors as Python numbers, once, so a call never reads them back."""
    args = dict(inputs)
    for name, cast in (("local_expert_offset", int), ("routed_scaling_factor", float)):
        args[name] = cast(args[name])
    return args


ROUTING_UNTIMED = ("; routing and permutation (torch, with the host sync for the row count) run in prepare, outside "
                   "the timed region: the call times the two grouped GEMMs, SwiGLU + requantisation and the combine "
                   "(this flatters the peer)")


class DeepGemmMoe(Peer):
    name = "deepgemm.m_grouped_contiguous+torch glue"
    definition = DEFINITION
    uses_cuda_graph = False  # the host-side row count makes the call non-capturable
    jit_weight = 1  # DeepGEMM compiles one kernel per GEMM configuration on first use
    note = ("torch routing/permute/SwiGLU/requant/combine around two DeepGEMM m_grouped_fp8_gemm_nt_contiguous "
            "calls; one host sync per call for the permuted row count")
    requires = ("deep_gemm",)
    pip_names = ("sgl-deep-gemm==0.1.5.post1", "apache-tvm-ffi==0.1.11")
    routing_untimed = False

    def _prepare(self, inputs):
        dg = self.module("deep_gemm")
        align = int(dg.get_mk_alignment_for_contiguous_layout())

        def grouped_gemm(a, a_scale, w, w_scale, grouped_layout, _src_rows):  # None: moe_forward gathered rows
            d = torch.empty((a.shape[0], w.shape[1]), dtype=torch.bfloat16, device=a.device)
            dg.m_grouped_fp8_gemm_nt_contiguous((a, a_scale), (w, w_scale), d, grouped_layout)
            return d

        args = _host_scalars(inputs)
        perm = route_and_permute(args, align) if self.routing_untimed else None

        def run() -> Outputs:
            return (moe_forward(args, grouped_gemm, align, perm=perm),)

        return run


class DeepGemmMoeRoutingUntimed(DeepGemmMoe):
    name = "deepgemm.m_grouped_contiguous+torch glue, routing untimed"
    note = DeepGemmMoe.note + ROUTING_UNTIMED
    routing_untimed = True


# ---- sglang's Triton fused_moe_kernel ------------------------------------------------------------------------------

# fused_moe_kernel's parameters in sglang 0.5.16, all passed by name (num_warps / num_stages are launch options).
KERNEL_PARAMS = (
    "a_ptr", "a_desc", "b_ptr", "b_desc", "bias_ptr", "c_ptr", "a_scale_ptr", "b_scale_ptr", "topk_weights_ptr",
    "sorted_token_ids_ptr", "expert_ids_ptr", "num_tokens_post_padded_ptr", "add_mask_ptr",
    "N", "K", "EM", "num_valid_tokens",
    "stride_am", "stride_ak", "stride_be", "stride_bk", "stride_bn", "stride_bias_e", "stride_bias_n",
    "stride_cm", "stride_cn", "stride_asm", "stride_ask", "stride_bse", "stride_bsk", "stride_bsn",
    "group_n", "group_k", "BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "MUL_ROUTED_WEIGHT",
    "top_k", "compute_type", "use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "per_channel_quant", "even_Ks",
    "c_sorted", "filter_expert", "swap_ab", "FUSE_ADD_TO_OUTPUT", "MASK_OUTPUT", "FUSE_SUM_ALL_REDUCE",
    "LORA_PRESERVE_BASE", "ROUTER_TOPK",
)
META_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")
LAUNCH_KEYS = ("num_warps", "num_stages")


def _not_carried(*_args, **_kwargs):
    raise NotImplementedError("not carried: the peer hands fused_moe_kernel FP8 activations with their scales")


def _cuda() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def _sm90() -> bool:
    """sglang's is_sm90_supported: a compute capability 9.x device and CUDA >= 12.3."""
    if not _cuda():
        return False
    cuda = tuple(int(x) for x in str(torch.version.cuda).split(".")[:2])
    return torch.cuda.get_device_capability()[0] == 9 and cuda >= (12, 3)


def _env_flag(name: str, default: str = "false") -> bool:
    return os.getenv(name, default).lower() in ("true", "1")


def sglang_stubs() -> dict[str, dict[str, object]]:
    """What fused_moe_triton_kernels.py (0.5.16) imports from the rest of sglang, answered without it."""
    fp8 = ("per_token_group_quant_fp8", "scaled_fp8_quant", "sglang_per_token_group_quant_fp8")
    int8 = ("per_token_group_quant_int8", "per_token_quant_int8", "sglang_per_token_group_quant_int8")
    return {
        "sglang.kernels.ops.quantization.fp8_kernel": dict.fromkeys(fp8, _not_carried),
        "sglang.kernels.ops.quantization.int8_kernel": dict.fromkeys(int8, _not_carried),
        "sglang.srt.batch_invariant_ops": {"is_batch_invariant_mode_enabled": lambda: False},
        "sglang.srt.layers.moe.utils": {"get_moe_padding_size": lambda _aiter: 0},  # only non-block fp8 pads K
        "sglang.srt.utils": {"cpu_has_amx_support": lambda: False, "get_bool_env_var": _env_flag,
                             "is_cpu": lambda: False, "is_cuda": _cuda, "is_hip": lambda: torch.version.hip is not None,
                             "is_sm90_supported": _sm90},
    }


def installed_path(archive_path: str) -> Path | None:
    """Where an archive member of a wheel ('pkg/sub/file') is installed, found without importing pkg."""
    package, _, relative = archive_path.partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        if (path := Path(root, relative)).exists():
            return path
    return None


@functools.lru_cache(maxsize=None)
def load_kernels(path: str):
    return load_file_with_stubs(path, "_fib_sdk_sglang_fused_moe_triton_kernels", sglang_stubs())


def config_file_name(device_name: str, experts: int = LOCAL_EXPERTS, n: int = INTERMEDIATE) -> str:
    """vLLM's tuned-config file name (sglang spells the block shape '[128, 128]'; vLLM, whose file this is, not)."""
    return (f"E={experts},N={n},device_name={device_name.replace(' ', '_')},dtype=fp8_w8a8,"
            f"block_shape=[{BLOCK},{BLOCK}].json")


def load_tuned_configs(path: Path | str) -> dict[int, dict]:
    """{batch size: config} from a tuned fused_moe file (its 'triton_version' entry is not a batch size)."""
    data = json.loads(Path(path).read_text())
    return {int(key): dict(value) for key, value in data.items() if key.isdigit()}


def pick_config(configs: dict[int, dict], tokens: int) -> dict:
    """sglang's pick: the entry whose batch size is nearest the token count (a tie goes to the smaller), with
    BLOCK_SIZE_K capped at the 128-column scale block (as vLLM does for block-quantised weights)."""
    if not configs:
        raise ValueError("no tuned configs")
    nearest = min(sorted(configs), key=lambda m: abs(m - tokens))
    config = {key: int(configs[nearest][key]) for key in (*META_KEYS, *LAUNCH_KEYS) if key in configs[nearest]}
    config["BLOCK_SIZE_K"] = min(config["BLOCK_SIZE_K"], BLOCK)
    return config


def kernel_arguments(a, a_scale, w, w_scale, c, sorted_ids, expert_ids, post_padded, topk_weights, meta: dict,
                     swap_ab: bool, compute_type) -> dict:
    """fused_moe_kernel's arguments for one FP8 [128, 128] block-scale GEMM: C[i] = A[sorted_ids[i]] @ W[e].T for
    the rows i of each BLOCK_SIZE_M block of expert e = expert_ids[block]; sorted_ids >= len(A) masks a row.
    Strides carry the layouts (the scales may be MN-major views), nothing is copied."""
    return dict(
        a_ptr=a, a_desc=None, b_ptr=w, b_desc=None, bias_ptr=None, c_ptr=c, a_scale_ptr=a_scale,
        b_scale_ptr=w_scale, topk_weights_ptr=topk_weights, sorted_token_ids_ptr=sorted_ids,
        expert_ids_ptr=expert_ids, num_tokens_post_padded_ptr=post_padded, add_mask_ptr=None,
        N=w.shape[1], K=w.shape[2], EM=sorted_ids.shape[0], num_valid_tokens=a.shape[0],
        stride_am=a.stride(0), stride_ak=a.stride(1),
        stride_be=w.stride(0), stride_bk=w.stride(2), stride_bn=w.stride(1), stride_bias_e=0, stride_bias_n=0,
        stride_cm=c.stride(0), stride_cn=c.stride(1), stride_asm=a_scale.stride(0), stride_ask=a_scale.stride(1),
        stride_bse=w_scale.stride(0), stride_bsk=w_scale.stride(2), stride_bsn=w_scale.stride(1),
        group_n=BLOCK, group_k=BLOCK, **{key: meta[key] for key in META_KEYS},
        MUL_ROUTED_WEIGHT=False, top_k=1, compute_type=compute_type, use_fp8_w8a8=True, use_int8_w8a8=False,
        use_int8_w8a16=False, per_channel_quant=False, even_Ks=w.shape[2] % meta["BLOCK_SIZE_K"] == 0,
        c_sorted=True, filter_expert=True, swap_ab=swap_ab, FUSE_ADD_TO_OUTPUT=False, MASK_OUTPUT=False,
        FUSE_SUM_ALL_REDUCE=False, LORA_PRESERVE_BASE=False, ROUTER_TOPK=1,
    )


def fused_moe_gemm(kernel, config: dict, swap_ab: bool, compute_type, topk_weights: torch.Tensor):
    """moe_forward's grouped_gemm as one fused_moe_kernel launch (rows already aligned to BLOCK_SIZE_M)."""
    meta = {key: config[key] for key in META_KEYS}
    launch = {key: config[key] for key in LAUNCH_KEYS if key in config}
    bm, bn = meta["BLOCK_SIZE_M"], meta["BLOCK_SIZE_N"]

    def gemm(a, a_scale, w, w_scale, grouped_layout, src_rows):
        M, N = grouped_layout.shape[0], w.shape[1]
        rows = src_rows if src_rows is not None else torch.arange(M, device=a.device)
        sorted_ids = torch.where(grouped_layout >= 0, rows, a.shape[0]).to(torch.int32)  # padding rows masked
        expert_ids = grouped_layout[::bm].contiguous()  # segments are BLOCK_SIZE_M-aligned: one expert per block
        post_padded = torch.full((1,), M, dtype=torch.int32, device=a.device)
        c = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        grid = (-(-M // bm) * -(-N // bn),)
        kernel[grid](**kernel_arguments(a, a_scale, w, w_scale, c, sorted_ids, expert_ids, post_padded,
                                        topk_weights, meta, swap_ab, compute_type), **launch)
        return c

    return gemm


def triton_moe_call(inputs: dict, kernels, configs: dict[int, dict],
                    routing_untimed: bool = False) -> Callable[[], Outputs]:
    """The per-call work on these inputs: `kernels` is the loaded sglang module (fused_moe_kernel,
    should_enable_swap_ab, tl), `configs` the tuned file's entries. The chosen config is `run.config`. With
    `routing_untimed` the routing and permutation are done here, once, outside the call."""
    hs = inputs["hidden_states"]
    config = pick_config(configs, int(hs.shape[0]))
    swap_ab = bool(kernels.should_enable_swap_ab(config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]))
    unused_weights = torch.zeros(1, dtype=torch.float32, device=hs.device)  # MUL_ROUTED_WEIGHT is off
    gemm = fused_moe_gemm(kernels.fused_moe_kernel, config, swap_ab, kernels.tl.bfloat16, unused_weights)
    args = _host_scalars(inputs)
    perm = route_and_permute(args, config["BLOCK_SIZE_M"]) if routing_untimed else None

    def run() -> Outputs:
        return (moe_forward(args, gemm, config["BLOCK_SIZE_M"], indirect=True, perm=perm),)

    run.config = {**config, "swap_ab": swap_ab}
    return run


class SglangTritonMoe(Peer):
    name = "sglang.fused_moe_kernel triton+vllm tuned config+torch glue"
    definition = DEFINITION
    uses_cuda_graph = False  # the host-side row count makes the call non-capturable
    jit_weight = 1  # Triton compiles fused_moe_kernel once per config on first use (seconds)
    note = (f"torch routing/permute/SwiGLU/requant/combine around two launches of sglang {SGLANG_VERSION}'s Triton "
            f"fused_moe_kernel (fp8_w8a8, block [128,128]); block sizes from vllm {VLLM_VERSION}'s tuned "
            "configs/E=32,N=2048,device_name=<this GPU, NVIDIA_H200>,dtype=fp8_w8a8,block_shape=[128,128].json, "
            "entry nearest T (sglang's rule), BLOCK_SIZE_K capped at 128 (as vLLM); one host sync per call for the "
            "permuted row count")
    requires = ("triton",)
    pip_names = (f"sglang=={SGLANG_VERSION}", f"vllm=={VLLM_VERSION}")
    routing_untimed = False

    def available(self) -> tuple[bool, str]:
        try:
            for path in (SGLANG_MOE_KERNELS, VLLM_MOE_CONFIGS):
                if installed_path(path) is None:
                    return False, (f"{path.replace('/', '.').removesuffix('.py')} not importable: install "
                                   f"{' + '.join(self.pip_names)} (trimmed by fib-sdk env wheels)")
            if importlib.util.find_spec("triton") is None:
                return False, "triton not importable: it comes with a CUDA build of torch (torch 2.11: triton 3.6)"
        except Exception as exc:  # noqa: BLE001 - available() must never raise
            return False, f"availability check failed ({_first_line(exc)})"
        return super().available()

    def config_path(self) -> Path | None:
        folder = installed_path(VLLM_MOE_CONFIGS)
        path = folder / config_file_name(torch.cuda.get_device_name()) if folder else None
        return path if path and path.is_file() else None

    def _extra_reason(self) -> str:
        if self.config_path() is None:  # runs after the sm_90 check: a CUDA device is there
            return (f"no tuned config {config_file_name(torch.cuda.get_device_name())} in vllm=={VLLM_VERSION}'s "
                    "fused_moe configs (this peer runs with the config tuned for its GPU, or not at all)")
        try:
            kernels = load_kernels(str(installed_path(SGLANG_MOE_KERNELS)))
        except Exception as exc:  # noqa: BLE001 - whatever the module raises is the reason
            return f"loading sglang's {SGLANG_MOE_KERNELS} failed ({_first_line(exc)})"
        names = set(getattr(kernels.fused_moe_kernel, "arg_names", KERNEL_PARAMS))
        if names != set(KERNEL_PARAMS):
            return (f"fused_moe_kernel's parameters are not sglang {SGLANG_VERSION}'s (missing "
                    f"{sorted(set(KERNEL_PARAMS) - names)}, new {sorted(names - set(KERNEL_PARAMS))})")
        return ""

    def _prepare(self, inputs):
        kernels = load_kernels(str(installed_path(SGLANG_MOE_KERNELS)))
        return triton_moe_call(inputs, kernels, load_tuned_configs(self.config_path()), self.routing_untimed)


class SglangTritonMoeRoutingUntimed(SglangTritonMoe):
    name = "sglang.fused_moe_kernel triton+vllm tuned config+torch glue, routing untimed"
    note = SglangTritonMoe.note + ROUTING_UNTIMED
    routing_untimed = True


PEERS = [DeepGemmMoe(), SglangTritonMoe(), DeepGemmMoeRoutingUntimed(), SglangTritonMoeRoutingUntimed()]
