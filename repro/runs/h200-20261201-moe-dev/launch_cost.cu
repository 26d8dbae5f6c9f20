#include <chrono>
#include <cstdio>
#include "sm90_ptx.cuh"
__global__ void empty_kernel(int x) { if (x == 12345) printf("x"); }
__global__ void pdl_kernel(int x) { sm90::pdl_wait(); if (x == 12345) printf("x"); }
template <class F> double per_us(F f, int n = 2000) {
  for (int i = 0; i < 100; ++i) f();
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  cudaDeviceSynchronize();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}
int main() {
  cudaStream_t s; cudaStreamCreate(&s);
  void* buf; cudaMalloc(&buf, 1 << 26);
  printf("<<<>>> empty: %.2f us\n", per_us([&] { empty_kernel<<<132, 128, 0, s>>>(1); }));
  printf("LaunchKernelEx PDL: %.2f us\n", per_us([&] { sm90::launch_pdl(pdl_kernel, 132, 128, 0, s, 1); }));
  CUtensorMap m;
  printf("encode_tma_2d: %.2f us\n", per_us([&] { sm90::encode_tma_2d(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, buf, 7168, 1000, 7168, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B); }));
  printf("cudaGetLastError: %.2f us\n", per_us([&] { cudaGetLastError(); }));
  int dev; printf("cudaGetDevice: %.2f us\n", per_us([&] { cudaGetDevice(&dev); }));
  // a chain of 7 launches, alternating, wall per chain incl. sync
  auto chain = [&] { empty_kernel<<<132, 128, 0, s>>>(1); for (int i = 0; i < 6; ++i) sm90::launch_pdl(pdl_kernel, 132, 128, 0, s, 1); };
  printf("chain of 7 (enqueue): %.2f us\n", per_us(chain, 500));
  auto chain_sync = [&] { chain(); cudaStreamSynchronize(s); };
  printf("chain of 7 + sync: %.2f us\n", per_us(chain_sync, 500));
  auto chain_plain = [&] { for (int i = 0; i < 7; ++i) empty_kernel<<<132, 128, 0, s>>>(1); cudaStreamSynchronize(s); };
  printf("7 plain + sync: %.2f us\n", per_us(chain_plain, 500));
  return 0;
}
