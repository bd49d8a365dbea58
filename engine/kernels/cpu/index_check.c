/* CPU index range check: the first element of an int32/int64 tensor outside the range. */
#include "kernels/cpu/cpu_kernels.h"

static tl_status check_range(const tl_tensor *indices, const tl_index_range *range) {
    const int64_t n = tl_numel(indices), first = range->first, count = range->count;
    const bool wide = indices->dtype == TL_I64;
    const int64_t *i64 = tl_data(indices);
    const int32_t *i32 = tl_data(indices);
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = wide ? i64[i] : (int64_t)i32[i];
        /* v - first cannot overflow once v >= first: both are int64 and first <= v */
        if (v < first || (uint64_t)v - (uint64_t)first >= (uint64_t)count)
            return tl_index_range_error(range, indices->shape, indices->ndim, v, i);
    }
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(index_check, TL_DTYPES_INTEGER, index_check, check_range),
};

TL_KERNEL_TABLE(tl_cpu_index_check_table, TL_DEVICE_CPU, entries);
