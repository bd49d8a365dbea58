/* tl_check_index_range: index values checked against a range, on the indices' device. */
#include "ops/nn/nn_common.h"
#include "tlua/cuda.h"

tl_status tl_check_index_range(const tl_tensor *indices, const tl_index_range *range) {
    if (!indices || !range || !range->op || !range->what || !range->range_of)
        return tl_error(TL_ERR_ARGUMENT, "check_index_range: indices, range and its op, what and "
                                         "range_of must not be NULL");
    TL_TRY(nn_check_integer(range->op, range->what, indices));
    if (range->count < 0 || (range->count > 0 && range->first > INT64_MAX - (range->count - 1)))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: the range of %s (first %lld, count %lld) must have count >= 0 and "
                        "end within int64",
                        range->op, range->what, (long long)range->first, (long long)range->count);
    if (tl_numel(indices) == 0) return TL_OK;
    const tl_device device = tl_tensor_device(indices);
    tl_tensor *dense = NULL;
    TL_TRY(tl_contiguous((tl_tensor *)indices, &dense));
    const tl_kernel_entry *k =
        tl_dispatch(TL_OP_index_check, device, dense->dtype, NN_TENSORS(dense));
    tl_status status = k ? k->fn.index_check(dense, range) : tl_dispatch_status();
    tl_release(dense); /* a CUDA check holds no reference: the stream orders the reuse */
    if (status == TL_OK && device.type == TL_DEVICE_CUDA && tl_sync_checks())
        status = tl_cuda_synchronize(device.index);
    return status;
}
