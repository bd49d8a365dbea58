/* CUDA index range check, the C side: registers what a failure names, then queues the check. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status check_range(const tl_tensor *indices, const tl_index_range *range) {
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(indices, range->op, &at));
    tl_cuda_fault *fault = NULL;
    unsigned int id = 0;
    TL_TRY(tl_cuda_fault_arm(at.device, range, indices->shape, indices->ndim, &fault, &id));
    return tl_cuda_index_check_run(&at, tl_data(indices), (int)indices->dtype, tl_numel(indices),
                                   range->first, range->count, fault, id);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(index_check, TL_DTYPES_INTEGER, index_check, check_range),
};

TL_KERNEL_TABLE(tl_cuda_index_check_table, TL_DEVICE_CUDA, entries);
