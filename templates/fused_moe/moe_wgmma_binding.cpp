// torch binding of the wgmma/TMA grouped GEMMs (moe_wgmma_launch.cu), destination-passing: argument checks, the
// current stream, no allocation (forward: one workspace). Used by tests/test_kernel_fused_moe_wgmma.py.
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>

#include "moe_wgmma_api.h"

namespace {

using fused_moe::wg::GroupedGemm;

void expect(const torch::Tensor& t, at::ScalarType type, int64_t dims, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == type && t.dim() == dims && t.is_contiguous(), name,
              ": expected a contiguous CUDA tensor of dtype ", type, " with ", dims, " dims, got ", t.scalar_type(),
              " ", t.sizes());
}

// kind: 0 = f32 out [rows][n], 1 = bf16 out [rows][n] times row_weight, 2 = SwiGLU e4m3 out [rows][n/2] + scales.
void gemm(int64_t kind, torch::Tensor a, torch::Tensor sfa, torch::Tensor b, torch::Tensor sfb, torch::Tensor counts,
          torch::Tensor offsets, torch::Tensor out, c10::optional<torch::Tensor> out_scale,
          c10::optional<torch::Tensor> row_weight, int64_t tile) {
  expect(a, at::kFloat8_e4m3fn, 2, "a");
  expect(sfa, at::kFloat, 2, "sfa");
  expect(b, at::kFloat8_e4m3fn, 3, "b");
  expect(sfb, at::kFloat, 3, "sfb");
  expect(counts, at::kInt, 1, "counts");
  expect(offsets, at::kInt, 1, "offsets");
  const int64_t rows = a.size(0), k = a.size(1), groups = b.size(0), n = b.size(1);
  TORCH_CHECK(b.size(2) == k && k % 128 == 0 && n % 128 == 0, "b must be [groups, n, k] with k, n multiples of 128");
  TORCH_CHECK(sfa.size(0) == k / 128 && sfa.size(1) >= rows && sfa.size(1) % 4 == 0, "sfa must be [k/128, ld>=rows]");
  TORCH_CHECK(sfb.size(0) == groups && sfb.size(1) == n / 128 && sfb.size(2) == k / 128,
              "sfb must be [g, n/128, k/128]");
  TORCH_CHECK(counts.numel() == groups && offsets.numel() == groups && groups <= 32, "counts/offsets: [groups <= 32]");
  GroupedGemm p{a.data_ptr(), static_cast<int>(rows), sfa.data_ptr<float>(), static_cast<int>(sfa.size(1)),
                b.data_ptr(), sfb.data_ptr<float>(), static_cast<int>(groups), static_cast<int>(n),
                static_cast<int>(k), counts.data_ptr<int>(), offsets.data_ptr<int>(), out.data_ptr(),
                static_cast<int>(out.size(1)), nullptr, 0, nullptr};
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  TORCH_CHECK((tile >= 0 && tile <= 3) || tile == 6,
              "tile: 0 (BM 128), 1 (BM 64), 2 / 3 (swap-AB, 16 / 32 tokens), 6 (BM 128, 256 columns)");
  const auto t = static_cast<fused_moe::wg::Tile>(tile);
  cudaError_t err = cudaErrorInvalidValue;
  if (kind == 0) {
    expect(out, at::kFloat, 2, "out");
    TORCH_CHECK(out.size(0) == rows && out.size(1) == n, "out must be [rows, n]");
    err = fused_moe::wg::gemm_f32(p, stream, t);
  } else if (kind == 1) {
    expect(out, at::kBFloat16, 2, "out");
    TORCH_CHECK(out.size(0) == rows && out.size(1) == n, "out must be [rows, n]");
    if (row_weight.has_value()) {
      expect(*row_weight, at::kFloat, 1, "row_weight");
      TORCH_CHECK(row_weight->numel() >= rows, "row_weight must have a value per row");
      p.row_weight = row_weight->data_ptr<float>();
    }
    err = fused_moe::wg::gemm2_rowweight_bf16(p, stream, t);
  } else if (kind == 2) {
    expect(out, at::kFloat8_e4m3fn, 2, "out");
    TORCH_CHECK(out.size(0) == rows && out.size(1) == n / 2 && n % 256 == 0, "out must be [rows, n/2]");
    TORCH_CHECK(out_scale.has_value(), "out_scale is required");
    expect(*out_scale, at::kFloat, 2, "out_scale");
    TORCH_CHECK(out_scale->size(0) == n / 256 && out_scale->size(1) >= rows, "out_scale must be [n/256, ld>=rows]");
    p.out_scale = out_scale->data_ptr<float>();
    p.out_scale_ld = static_cast<int>(out_scale->size(1));
    err = fused_moe::wg::gemm1_swiglu_fp8(p, stream, t);
  }
  C10_CUDA_CHECK(err);
}

void gather(torch::Tensor x, torch::Tensor x_scale, torch::Tensor perm_tok, torch::Tensor counts,
            torch::Tensor offsets, torch::Tensor xp, torch::Tensor xps) {
  expect(x, at::kFloat8_e4m3fn, 2, "x");
  expect(x_scale, at::kFloat, 2, "x_scale");
  expect(perm_tok, at::kInt, 1, "perm_tok");
  expect(counts, at::kInt, 1, "counts");
  expect(offsets, at::kInt, 1, "offsets");
  expect(xp, at::kFloat8_e4m3fn, 2, "xp");
  expect(xps, at::kFloat, 2, "xps");
  const int64_t T = x.size(0), k = x.size(1);
  TORCH_CHECK(x_scale.size(0) == k / 128 && x_scale.size(1) == T && xp.size(1) == k && xps.size(0) == k / 128,
              "shapes: x [T,k], x_scale [k/128,T], xp [cap,k], xps [k/128,ld]");
  const c10::cuda::CUDAGuard guard(x.device());
  C10_CUDA_CHECK(fused_moe::wg::gather_rows(x.data_ptr(), x_scale.data_ptr<float>(), static_cast<int>(T),
                                            static_cast<int>(k), perm_tok.data_ptr<int>(), counts.data_ptr<int>(),
                                            offsets.data_ptr<int>(), static_cast<int>(counts.numel()), xp.data_ptr(),
                                            xps.data_ptr<float>(), static_cast<int>(xps.size(1)),
                                            c10::cuda::getCurrentCUDAStream()));
}

// The whole MoE on the wgmma path (destination-passing, like the solution's forward); one workspace allocation.
void forward(torch::Tensor logits, torch::Tensor bias, torch::Tensor x, torch::Tensor x_scale, torch::Tensor w1,
             torch::Tensor w1_scale, torch::Tensor w2, torch::Tensor w2_scale, int64_t local_offset, double scaling,
             torch::Tensor out, int64_t tile) {
  using namespace fused_moe;
  TORCH_CHECK(tile >= 0 && tile <= 6, "tile: 0 (BM 128), 1 (BM 64), 2 / 3 (swap-AB, 16 / 32 tokens), 4 / 5 (BM 128 "
              "/ 64, GEMM1 gathering its rows), 6 (BM 128, 256 columns)");
  const int64_t T = x.size(0);
  auto check = [](const torch::Tensor& t, at::ScalarType type, std::vector<int64_t> shape, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == type && t.sizes() == c10::IntArrayRef(shape) && t.is_contiguous(),
                name, ": expected a contiguous CUDA tensor of dtype ", type, " and shape ", shape, ", got ",
                t.scalar_type(), " ", t.sizes());
  };
  check(logits, at::kFloat, {T, kNumExperts}, "routing_logits");
  check(bias, at::kBFloat16, {kNumExperts}, "routing_bias");
  check(x, at::kFloat8_e4m3fn, {T, kHidden}, "hidden_states");
  check(x_scale, at::kFloat, {kHiddenBlocks, T}, "hidden_states_scale");
  check(w1, at::kFloat8_e4m3fn, {kLocalExperts, kGemm1Out, kHidden}, "gemm1_weights");
  check(w1_scale, at::kFloat, {kLocalExperts, kGemm1OutBlocks, kHiddenBlocks}, "gemm1_weights_scale");
  check(w2, at::kFloat8_e4m3fn, {kLocalExperts, kHidden, kInter}, "gemm2_weights");
  check(w2_scale, at::kFloat, {kLocalExperts, kHiddenBlocks, kInterBlocks}, "gemm2_weights_scale");
  check(out, at::kBFloat16, {T, kHidden}, "output");
  TORCH_CHECK(T < (1 << 24), "seq_len too large for int32 slot arithmetic");
  if (T == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const MoeWorkspace layout = wg::test_workspace(T);
  torch::Tensor ws = torch::empty({static_cast<int64_t>(layout.bytes)}, x.options().dtype(torch::kUInt8));
  LaunchArgs args{logits.data_ptr<float>(), bias.data_ptr(), x.data_ptr(), x_scale.data_ptr<float>(),
                  w1.data_ptr(), w1_scale.data_ptr<float>(), w2.data_ptr(), w2_scale.data_ptr<float>(),
                  static_cast<int>(local_offset), static_cast<float>(scaling), out.data_ptr(), static_cast<int>(T),
                  ws.data_ptr<uint8_t>()};
  C10_CUDA_CHECK(wg::moe_forward(args, c10::cuda::getCurrentCUDAStream(), static_cast<wg::Tile>(tile)));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm", &gemm, "grouped FP8 block-scale GEMM (kind 0 f32, 1 bf16 x row weight, 2 SwiGLU + e4m3 requant)",
        py::arg("kind"), py::arg("a"), py::arg("sfa"), py::arg("b"), py::arg("sfb"), py::arg("counts"),
        py::arg("offsets"), py::arg("out"), py::arg("out_scale") = py::none(), py::arg("row_weight") = py::none(),
        py::arg("tile") = 0);
  m.def("gather", &gather, "rows of x (and their scales) in expert order");
  m.def("forward", &forward, "DeepSeek-V3 FP8 block-scale MoE on the wgmma path (32 local experts), DPS",
        py::arg("routing_logits"), py::arg("routing_bias"), py::arg("hidden_states"), py::arg("hidden_states_scale"),
        py::arg("gemm1_weights"), py::arg("gemm1_weights_scale"), py::arg("gemm2_weights"),
        py::arg("gemm2_weights_scale"), py::arg("local_expert_offset"), py::arg("routed_scaling_factor"),
        py::arg("output"), py::arg("tile") = 0);
  m.def("config", []() { return std::string(fused_moe::wg::config_summary()); });
}
