// Torch binding of the DSA top-k indexer: checks shapes and dtypes, launches on the current stream.
// No synchronisation and no data read back: the launched kernel depends on shapes only.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "indexer_api.h"

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

// Returns false (nothing launched) when the block table is wider than this build handles on the device.
bool run(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& weights, const at::Tensor& seq_lens,
         const at::Tensor& block_table, at::Tensor& topk_indices) {
    TORCH_CHECK(q.is_cuda() && q.dim() == 3 && k_cache.dim() == 4 && block_table.dim() == 2,
                "q_index_fp8 [B,64,128], k_index_cache_fp8 [P,64,1,132] and block_table [B,M] must be CUDA tensors");
    const auto device = q.device();
    const int64_t batch = q.size(0), pages = k_cache.size(0), max_pages = block_table.size(1);
    check_tensor(q, "q_index_fp8", at::kFloat8_e4m3fn, {batch, 64, 128}, device);
    TORCH_CHECK(k_cache.scalar_type() == at::kChar || k_cache.scalar_type() == at::kByte,
                "k_index_cache_fp8 must hold int8 or uint8 bytes, is ", k_cache.scalar_type());
    check_tensor(k_cache, "k_index_cache_fp8", k_cache.scalar_type(), {pages, 64, 1, 132}, device);
    check_tensor(weights, "weights", at::kFloat, {batch, 64}, device);
    check_tensor(seq_lens, "seq_lens", at::kInt, {batch}, device);
    check_tensor(block_table, "block_table", at::kInt, {batch, max_pages}, device);
    check_tensor(topk_indices, "topk_indices", at::kInt, {batch, 2048}, device);
    TORCH_CHECK(batch < 65536 && max_pages < (1 << 24), "batch or block table too large: ", batch, " x ",
                max_pages);
    if (batch == 0) return true;

    const c10::cuda::CUDAGuard guard(device);
    if (max_pages > dsa_indexer_max_pages(device.index())) return false;
    DsaIndexerParams params{};
    params.q = q.data_ptr();
    params.k_cache = k_cache.data_ptr();
    params.weights = weights.data_ptr<float>();
    params.seq_lens = seq_lens.data_ptr<int32_t>();
    params.block_table = block_table.data_ptr<int32_t>();
    params.batch = static_cast<int>(batch);
    params.max_pages = static_cast<int>(max_pages);
    params.topk_indices = topk_indices.data_ptr<int32_t>();
    const cudaError_t err = dsa_indexer_launch(params, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "dsa top-k indexer launch failed: ", cudaGetErrorString(err));
    return true;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("run", &run, "DSA top-k indexer (destination-passing); false when the block table is too wide",
          py::arg("q_index_fp8"), py::arg("k_index_cache_fp8"), py::arg("weights"), py::arg("seq_lens"),
          py::arg("block_table"), py::arg("topk_indices"));
}
