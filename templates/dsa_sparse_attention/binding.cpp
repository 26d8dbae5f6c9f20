// Torch binding: checks shapes and dtypes, allocates the split workspace (if any), launches on the current stream.
// No synchronisation and no data read back: the launched kernels depend on shapes only.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "dsa_sparse_attention_api.h"

namespace {

void check_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype, std::vector<int64_t> shape,
                  const at::Device& device) {
    TORCH_CHECK(t.device() == device, name, " must be on ", device, ", is on ", t.device());
    TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", is ", t.scalar_type());
    TORCH_CHECK(t.sizes() == at::IntArrayRef(shape), name, " must have shape ", at::IntArrayRef(shape), ", has ",
                t.sizes());
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

void forward(const at::Tensor& q_nope, const at::Tensor& q_pe, const at::Tensor& ckv_cache,
             const at::Tensor& kpe_cache, const at::Tensor& sparse_indices, double sm_scale,
             const c10::optional<at::Tensor>& sm_scale_tensor, at::Tensor& output, at::Tensor& lse) {
    TORCH_CHECK(q_nope.is_cuda() && q_nope.dim() == 3 && ckv_cache.dim() == 3, "q_nope [N,16,512] and ckv_cache "
                "[P,64,512] must be CUDA tensors");
    const auto device = q_nope.device();
    const int64_t tokens = q_nope.size(0), pages = ckv_cache.size(0);
    const auto bf16 = at::kBFloat16;
    check_tensor(q_nope, "q_nope", bf16, {tokens, 16, 512}, device);
    check_tensor(q_pe, "q_pe", bf16, {tokens, 16, 64}, device);
    check_tensor(ckv_cache, "ckv_cache", bf16, {pages, 64, 512}, device);
    check_tensor(kpe_cache, "kpe_cache", bf16, {pages, 64, 64}, device);
    check_tensor(sparse_indices, "sparse_indices", at::kInt, {tokens, 2048}, device);
    check_tensor(output, "output", bf16, {tokens, 16, 512}, device);
    check_tensor(lse, "lse", at::kFloat, {tokens, 16}, device);
    TORCH_CHECK(tokens < (1 << 24), "too many tokens: ", tokens);
    if (sm_scale_tensor.has_value()) {
        const auto& s = *sm_scale_tensor;
        TORCH_CHECK(s.device() == device && s.scalar_type() == at::kFloat && s.numel() == 1,
                    "a tensor sm_scale must be one float32 on the inputs' device");
    }
    if (tokens == 0) return;

    const c10::cuda::CUDAGuard guard(device);
    int num_sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device.index()));
    const int splits = dsa_attention_splits(static_cast<int>(tokens), num_sms);
    const int64_t part_rows = tokens * splits * 16;
    at::Tensor workspace;
    if (dsa_attention_needs_workspace())
        workspace = at::empty({part_rows * (512 + 1)}, q_nope.options().dtype(at::kFloat));

    DsaAttentionParams params{};
    params.q_nope = q_nope.data_ptr();
    params.q_pe = q_pe.data_ptr();
    params.ckv_cache = ckv_cache.data_ptr();
    params.kpe_cache = kpe_cache.data_ptr();
    params.indices = sparse_indices.data_ptr<int32_t>();
    params.scale_ptr = sm_scale_tensor.has_value() ? sm_scale_tensor->data_ptr<float>() : nullptr;
    params.scale = static_cast<float>(sm_scale);
    params.num_tokens = static_cast<int>(tokens);
    params.splits = splits;
    params.total_rows = pages * 64;
    params.partial_out = workspace.defined() ? workspace.data_ptr<float>() : nullptr;
    params.partial_lse = workspace.defined() ? params.partial_out + part_rows * 512 : nullptr;
    params.output = output.data_ptr();
    params.lse = lse.data_ptr<float>();
    const cudaError_t err = dsa_attention_launch(params, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "dsa sparse attention launch failed: ", cudaGetErrorString(err));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "DSA sparse attention (destination-passing)", py::arg("q_nope"), py::arg("q_pe"),
          py::arg("ckv_cache"), py::arg("kpe_cache"), py::arg("sparse_indices"), py::arg("sm_scale"),
          py::arg("sm_scale_tensor"), py::arg("output"), py::arg("lse"));
}
