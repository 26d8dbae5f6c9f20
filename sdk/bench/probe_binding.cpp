// torch binding of the probe kernel (probe_stream.cu); the kernel file itself has no torch dependency, so it can be
// compiled and disassembled on its own.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int fib_probe_threads_per_block();
extern "C" int fib_probe_piece_bytes();
extern "C" int fib_probe_blocks(long long n_pieces, long long dst_chunks);
extern "C" cudaError_t fib_probe_launch(const unsigned long long* pieces, long long n_pieces, void* dst,
                                        long long dst_chunks, unsigned* sink, int blocks, cudaStream_t stream);

static int64_t blocks(int64_t n_pieces, int64_t dst_bytes) { return fib_probe_blocks(n_pieces, dst_bytes / 16); }

static void stream(const torch::Tensor& pieces, torch::Tensor& dst, torch::Tensor& sink, int64_t blocks) {
  TORCH_CHECK(pieces.is_cuda() && pieces.scalar_type() == torch::kInt64 && pieces.is_contiguous(),
              "pieces: a contiguous int64 CUDA tensor");
  TORCH_CHECK(dst.is_cuda() && dst.is_contiguous() && dst.nbytes() % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0,
              "dst: a contiguous CUDA buffer, 16-byte aligned, a multiple of 16 bytes");
  TORCH_CHECK(sink.is_cuda() && sink.element_size() == 4 && sink.numel() * 32 >= blocks * fib_probe_threads_per_block(),
              "sink: one 4-byte word per warp of the launch");
  const c10::cuda::CUDAGuard guard(pieces.device());
  const cudaError_t err = fib_probe_launch(reinterpret_cast<const unsigned long long*>(pieces.data_ptr<int64_t>()),
                                           pieces.numel(), dst.data_ptr(), static_cast<long long>(dst.nbytes() / 16),
                                           reinterpret_cast<unsigned*>(sink.data_ptr()), static_cast<int>(blocks),
                                           c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "probe launch failed: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("threads_per_block", &fib_probe_threads_per_block);
  m.def("piece_bytes", &fib_probe_piece_bytes);
  m.def("blocks", &blocks);
  m.def("stream", &stream);
}
