// torch binding of the fused-MoE launcher (moe_launch.cu): argument checks, one workspace allocation per call
// (from torch's caching allocator; recomputed entirely by every call), the current stream.
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <string>
#include <vector>

#include "moe_api.h"

namespace {

using namespace fused_moe;

void expect(const torch::Tensor& t, at::ScalarType type, std::vector<int64_t> shape, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == type && t.sizes() == c10::IntArrayRef(shape) && t.is_contiguous(),
              name, ": expected a contiguous CUDA tensor of dtype ", type, " and shape ", shape, ", got ",
              t.scalar_type(), " ", t.sizes(), t.is_cuda() ? "" : " on the CPU");
  // The kernels read and write every tensor with 16-byte vectors or TMA (a view at an odd offset would fault).
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, ": expected a 16-byte aligned data pointer");
}

}  // namespace

void forward(torch::Tensor logits, torch::Tensor bias, torch::Tensor x, torch::Tensor x_scale, torch::Tensor w1,
             torch::Tensor w1_scale, torch::Tensor w2, torch::Tensor w2_scale, int64_t local_offset, double scaling,
             torch::Tensor out) {
  const int64_t T = x.size(0);
  expect(logits, at::kFloat, {T, kNumExperts}, "routing_logits");
  expect(bias, at::kBFloat16, {kNumExperts}, "routing_bias");
  expect(x, at::kFloat8_e4m3fn, {T, kHidden}, "hidden_states");
  expect(x_scale, at::kFloat, {kHiddenBlocks, T}, "hidden_states_scale");
  expect(w1, at::kFloat8_e4m3fn, {kLocalExperts, kGemm1Out, kHidden}, "gemm1_weights");
  expect(w1_scale, at::kFloat, {kLocalExperts, kGemm1OutBlocks, kHiddenBlocks}, "gemm1_weights_scale");
  expect(w2, at::kFloat8_e4m3fn, {kLocalExperts, kHidden, kInter}, "gemm2_weights");
  expect(w2_scale, at::kFloat, {kLocalExperts, kHiddenBlocks, kInterBlocks}, "gemm2_weights_scale");
  expect(out, at::kBFloat16, {T, kHidden}, "output");
  TORCH_CHECK(T < (1 << 24), "seq_len too large for int32 slot arithmetic");
  if (T == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const MoeWorkspace layout = workspace_layout(T);
  torch::Tensor ws = torch::empty({static_cast<int64_t>(layout.bytes)}, x.options().dtype(torch::kUInt8));
  const LaunchArgs args{logits.data_ptr<float>(), bias.data_ptr(), x.data_ptr(), x_scale.data_ptr<float>(),
                        w1.data_ptr(), w1_scale.data_ptr<float>(), w2.data_ptr(), w2_scale.data_ptr<float>(),
                        static_cast<int>(local_offset), static_cast<float>(scaling), out.data_ptr(),
                        static_cast<int>(T), ws.data_ptr<uint8_t>()};
  const char* failed = "launch";
  const cudaError_t err = launch(args, c10::cuda::getCurrentCUDAStream(), &failed);
  TORCH_CHECK(err == cudaSuccess, "fused_moe: ", failed, " failed: ", cudaGetErrorString(err), " (T=", T, ")");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "DeepSeek-V3 FP8 block-scale MoE (32 local experts), destination-passing");
  m.def("config", []() { return std::string(config_summary()); });
}
