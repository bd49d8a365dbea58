/* CUDA embedding and its backward, the C side: the dtypes of cpu/embedding.c
   (cuda/embedding.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status gather_rows(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    const int64_t n = tl_numel(indices), D = src->shape[1];
    if (n == 0 || D == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, "embedding", &at));
    return tl_cuda_embedding_run(&at, (int)src->dtype, tl_data(out), tl_data(src), tl_data(indices),
                                 (int)indices->dtype, n, src->shape[0], D);
}

static tl_status scatter_rows(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    const int64_t n = tl_numel(indices), rows = out->shape[0], D = out->shape[1];
    if (rows == 0 || D == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, "embedding_backward", &at));
    return tl_cuda_embedding_backward_run(&at, (int)src->dtype, tl_data(out), tl_data(src),
                                          tl_data(indices), (int)indices->dtype, n, rows, D);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(embedding, TL_DTYPES_FLOATING, embedding, gather_rows),
    TL_KERNEL(embedding_backward, TL_DTYPES_FLOATING, embedding, scatter_rows),
};

TL_KERNEL_TABLE(tl_cuda_embedding_table, TL_DEVICE_CUDA, entries);
