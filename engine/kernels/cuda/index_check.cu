/* CUDA index range check and its table: registers what a failure names, then queues the check,
   whose out-of-range elements claim the device's fault record. */
#include "kernels/cuda/describe.cuh"
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

/* indices (n, int32 or int64 by index_dtype) outside [first, first + count) are reported in
 *fault under id (the first failure wins; see tl_cuda_fault) */
static tl_status launch_index_check(const tl_cuda_where *at, const void *indices, int index_dtype,
                                    int64_t n, int64_t first, int64_t count, tl_cuda_fault *fault,
                                    unsigned int id) {
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

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_index_check(const tl_tensor *indices, const tl_index_range *range) {
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(indices, range->op, &at));
    tl_cuda_fault *fault = nullptr;
    unsigned int id = 0;
    TL_TRY(tl_cuda_fault_arm(at.device, range, indices->shape, indices->ndim, &fault, &id));
    return launch_index_check(&at, tl_data(indices), tl_cuda_dtype_of(indices), tl_numel(indices),
                              range->first, range->count, fault, id);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(index_check, TL_DTYPES_INTEGER, index_check, cuda_index_check),
};

TL_KERNEL_TABLE(tl_cuda_index_check_table, TL_DEVICE_CUDA, entries);
