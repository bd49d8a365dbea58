/* CPU index range check: the first element of an int32/int64 tensor outside the range, found
   by threads over ranges of the elements (the first failing range's first element). */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

/* the first i in [i0, i1) whose value lies outside [first, first + count), or -1 */
static int64_t first_outside(const tl_tensor *indices, int64_t i0, int64_t i1, int64_t first,
                             uint64_t count) {
    if (indices->dtype == TL_I64) {
        const int64_t *v = tl_data(indices);
        for (int64_t i = i0; i < i1; i++)
            if ((uint64_t)v[i] - (uint64_t)first >= count) return i;
    } else {
        const int32_t *v = tl_data(indices);
        for (int64_t i = i0; i < i1; i++)
            if ((uint64_t)(int64_t)v[i] - (uint64_t)first >= count) return i;
    }
    return -1;
}

static tl_status check_range(const tl_tensor *indices, const tl_index_range *range) {
    const int64_t n = tl_numel(indices);
    /* v in range iff v - first, wrapped to uint64, is below count (first <= v < first + count) */
    const int64_t blocks = n > TL_CPU_PARALLEL_THRESHOLD ? 64 : 1;
    int64_t found = INT64_MAX;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t i = first_outside(indices, n * b / blocks, n * (b + 1) / blocks, range->first,
                                        (uint64_t)range->count);
        if (i >= 0) {
#pragma omp critical(tl_cpu_index_check)
            if (i < found) found = i;
        }
    }
    if (found == INT64_MAX) return TL_OK;
    const int64_t v = indices->dtype == TL_I64 ? ((const int64_t *)tl_data(indices))[found]
                                               : ((const int32_t *)tl_data(indices))[found];
    return tl_index_range_error(range, indices->shape, indices->ndim, v, found);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(index_check, TL_DTYPES_INTEGER, index_check, check_range),
};

TL_KERNEL_TABLE(tl_cpu_index_check_table, TL_DEVICE_CPU, entries);
