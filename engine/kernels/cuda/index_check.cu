/* CUDA index range check, the device side: an out-of-range element claims the fault record. */
#include "kernels/cuda/ops_common.cuh"

#define CHECK_THREADS 256

template <typename I>
__global__ void __launch_bounds__(CHECK_THREADS)
    index_check_kernel(const I *indices, int64_t n, int64_t first, uint64_t count,
                       tl_cuda_fault *fault, unsigned int id) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t v = (int64_t)indices[i];
        if (v >= first && (uint64_t)v - (uint64_t)first < count) continue;
        /* the first failing check since the host last looked wins; one of its threads writes */
        if (atomicCAS(&fault->id, 0u, id) == 0u) {
            fault->value = v;
            fault->position = i;
            __threadfence_system();
        }
        return;
    }
}

extern "C" tl_status tl_cuda_index_check_run(const tl_cuda_where *at, const void *indices,
                                             int index_dtype, int64_t n, int64_t first,
                                             int64_t count, tl_cuda_fault *fault, unsigned int id) {
    if (n == 0) return TL_OK;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(n, CHECK_THREADS), at->sm_count);
    if (index_dtype == TL_CUDA_I64)
        index_check_kernel<<<grid, CHECK_THREADS, 0, at->stream>>>(
            (const int64_t *)indices, n, first, (uint64_t)count, fault, id);
    else
        index_check_kernel<<<grid, CHECK_THREADS, 0, at->stream>>>(
            (const int32_t *)indices, n, first, (uint64_t)count, fault, id);
    return tl_cuda_check_launch(at->op);
}
