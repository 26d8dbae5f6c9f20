// Host-side interface of the DSA top-k indexer kernels: plain types only, so the torch binding (host compiler) and
// the CUDA unit (nvcc) share it without either seeing the other's headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

struct DsaIndexerParams {
    const void* q;              // e4m3 [B, 64, 128]
    const void* k_cache;        // bytes [P, 64, 1, 132]: per page 64 x 128 e4m3 values, then 64 fp32 scales
    const float* weights;       // [B, 64]
    const int32_t* seq_lens;    // [B]
    const int32_t* block_table; // [B, max_pages]
    int batch;                  // B
    int max_pages;              // block-table columns
    int32_t* topk_indices;      // [B, 2048] global token ids, -1 padded
};

// Widest block table (in pages) this instantiation handles on `device` (shared memory holds one row's scores);
// depends on the device only. Wider tables must take another path.
int dsa_indexer_max_pages(int device);

// Launches the indexer on `stream` (one kernel; which one depends on max_pages only); no synchronisation.
cudaError_t dsa_indexer_launch(const DsaIndexerParams& params, cudaStream_t stream);
