// torch binding of the probe kernel (probe_stream.cu); the kernel file itself has no torch dependency, so it can be
// compiled and disassembled on its own.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int fib_probe_piece_bytes();
extern "C" int fib_probe_max_ranges();
extern "C" int fib_probe_ranges_bytes();
extern "C" int fib_probe_variants();
extern "C" const char* fib_probe_variant_name(int variant);
extern "C" int fib_probe_variant_threads(int variant);
extern "C" int fib_probe_piece_variants();
extern "C" const char* fib_probe_piece_variant_name(int variant);
extern "C" int fib_probe_piece_variant_threads(int variant);
extern "C" int fib_probe_piece_job_bytes(int variant);
extern "C" int fib_probe_piece_table_bytes();
extern "C" int fib_probe_piece_blocks(int variant, const void* params, long long dst_chunks);
extern "C" int fib_probe_range_blocks(int variant, long long chunks, long long n_loose, long long dst_chunks);
extern "C" cudaError_t fib_probe_launch_pieces(int variant, const unsigned long long* pieces, long long n_pieces,
                                               const void* params, void* dst, long long dst_chunks, unsigned* sink,
                                               int blocks, cudaStream_t stream);
extern "C" cudaError_t fib_probe_launch_ranges(int variant, const void* params, void* dst, long long dst_chunks,
                                               unsigned* sink, int blocks, cudaStream_t stream);

static std::string variant_name(int64_t variant) { return fib_probe_variant_name(static_cast<int>(variant)); }

static int64_t variant_threads(int64_t variant) { return fib_probe_variant_threads(static_cast<int>(variant)); }

static std::string piece_variant_name(int64_t variant) {
  return fib_probe_piece_variant_name(static_cast<int>(variant));
}

static int64_t piece_variant_threads(int64_t variant) {
  return fib_probe_piece_variant_threads(static_cast<int>(variant));
}

static int64_t piece_job_bytes(int64_t variant) { return fib_probe_piece_job_bytes(static_cast<int>(variant)); }

static void check_params(const torch::Tensor& params, int64_t bytes, const char* what) {
  TORCH_CHECK(params.device().is_cpu() && params.scalar_type() == torch::kInt64 && params.is_contiguous() &&
                  params.nbytes() == static_cast<size_t>(bytes),
              "params: the contiguous int64 CPU words of ", what);
}

static int64_t piece_blocks(int64_t variant, const torch::Tensor& params, int64_t dst_bytes) {
  check_params(params, fib_probe_piece_table_bytes(), "probe.piece_params");
  return fib_probe_piece_blocks(static_cast<int>(variant), params.data_ptr(), dst_bytes / 16);
}

static int64_t range_blocks(int64_t variant, int64_t chunks, int64_t n_loose, int64_t dst_bytes) {
  return fib_probe_range_blocks(static_cast<int>(variant), chunks, n_loose, dst_bytes / 16);
}

static void check_outputs(const torch::Tensor& dst, const torch::Tensor& sink, int64_t blocks, int64_t threads) {
  TORCH_CHECK(dst.is_cuda() && dst.is_contiguous() && dst.nbytes() % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0,
              "dst: a contiguous CUDA buffer, 16-byte aligned, a multiple of 16 bytes");
  TORCH_CHECK(sink.is_cuda() && sink.element_size() == 4 && sink.numel() * 32 >= blocks * threads,
              "sink: one 4-byte word per warp of the launch");
}

// `pieces`: the class-sorted table (probe.class_sorted) on the device; `params`: probe.piece_params' int64 words
// for it, on the CPU (they become the kernel's parameters at each launch, with the table's address); `variant`: the
// index of the kernel in probe.PIECE_VARIANTS.
static void stream_pieces(int64_t variant, const torch::Tensor& pieces, const torch::Tensor& params,
                          torch::Tensor& dst, torch::Tensor& sink, int64_t blocks) {
  TORCH_CHECK(pieces.is_cuda() && pieces.scalar_type() == torch::kInt64 && pieces.is_contiguous(),
              "pieces: a contiguous int64 CUDA tensor");
  check_params(params, fib_probe_piece_table_bytes(), "probe.piece_params");
  const c10::cuda::CUDAGuard guard(pieces.device());
  const int64_t threads = piece_variant_threads(variant);
  TORCH_CHECK(threads > 0, "probe pieces variant ", variant, " cannot run on this device or build");
  check_outputs(dst, sink, blocks, threads);
  const cudaError_t err = fib_probe_launch_pieces(
      static_cast<int>(variant), reinterpret_cast<const unsigned long long*>(pieces.data_ptr<int64_t>()),
      pieces.numel(), params.data_ptr(), dst.data_ptr(), static_cast<long long>(dst.nbytes() / 16),
      reinterpret_cast<unsigned*>(sink.data_ptr()), static_cast<int>(blocks), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "probe launch (pieces) failed: ", cudaGetErrorString(err));
}

// `params`: probe.pack_ranges' int64 words, on the CPU: they become the kernel's parameters at each launch;
// `variant`: the index of the kernel in probe.VARIANTS.
static void stream_ranges(int64_t variant, const torch::Tensor& params, torch::Tensor& dst, torch::Tensor& sink,
                          int64_t blocks) {
  check_params(params, fib_probe_ranges_bytes(), "probe.pack_ranges");
  const c10::cuda::CUDAGuard guard(dst.device());
  const int64_t threads = variant_threads(variant);
  TORCH_CHECK(threads > 0, "probe variant ", variant, " cannot run on this device or build");
  check_outputs(dst, sink, blocks, threads);
  const cudaError_t err = fib_probe_launch_ranges(static_cast<int>(variant), params.data_ptr(), dst.data_ptr(),
                                                  static_cast<long long>(dst.nbytes() / 16),
                                                  reinterpret_cast<unsigned*>(sink.data_ptr()),
                                                  static_cast<int>(blocks), c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "probe launch (ranges) failed: ", cudaGetErrorString(err));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("piece_bytes", &fib_probe_piece_bytes);
  m.def("max_ranges", &fib_probe_max_ranges);
  m.def("ranges_bytes", &fib_probe_ranges_bytes);
  m.def("variants", &fib_probe_variants);
  m.def("variant_name", &variant_name);
  m.def("variant_threads", &variant_threads);
  m.def("piece_variants", &fib_probe_piece_variants);
  m.def("piece_variant_name", &piece_variant_name);
  m.def("piece_variant_threads", &piece_variant_threads);
  m.def("piece_job_bytes", &piece_job_bytes);
  m.def("piece_table_bytes", &fib_probe_piece_table_bytes);
  m.def("piece_blocks", &piece_blocks);
  m.def("range_blocks", &range_blocks);
  m.def("stream_pieces", &stream_pieces);
  m.def("stream_ranges", &stream_ranges);
}
