/* CUDA matmul_inplace: on a Hopper GPU the Hopper core writes the product over x itself (clusters
   owning whole rows, no workspace); elsewhere cuBLAS GEMMs by tiles on the device's stream, each
   copied back by the device's copy kernel (kernels/matmul_inplace.c). */
#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/hopper_gemm.h"
#include "kernels/gemm.h"
#include "kernels/matmul_inplace.h"
#include "tlua/runtime.h"

#define OP_NAME "matmul_"

static const tl_kernel_variant inplace_paths[] = {
    TL_VARIANT(matmul_inplace, TL_DTYPES_BF16 | TL_DTYPES_F16, "hopper",
               "a Hopper GPU, x's rows and w 16-byte aligned, n a multiple of 8 up to 2048: the "
               "Hopper core over x in place, clusters owning whole rows"),
    TL_VARIANT(matmul_inplace, TL_DTYPES_FLOATING, "tiles",
               "anything else: cuBLAS by tiles of rows into the workspace, each copied back"),
};
TL_VARIANT_TABLE(tl_cuda_matmul_inplace_variants, TL_DEVICE_CUDA, inplace_paths);

/* The Hopper core's description of x <- x @ w for a row-major x (false where x or w has another
   layout: the core reads row-major x and either layout of w). */
static bool hopper_of(const tl_tensor *x, const tl_tensor *w, tl_hopper_gemm *g) {
    const int64_t rows = x->shape[0], n = x->shape[1];
    bool x_col_major, w_col_major;
    int64_t ldx, ldw;
    if (!tl_gemm_layout(rows, n, x->strides[0], x->strides[1], &x_col_major, &ldx) ||
        !tl_gemm_layout(n, n, w->strides[0], w->strides[1], &w_col_major, &ldw) || x_col_major)
        return false;
    /* w row-major is [k, n] (N-major); column-major it is w^T stored [n, k] (K-major) */
    *g = (tl_hopper_gemm){.kind = TL_HOPPER_INPLACE,
                          .half = x->dtype == TL_F16,
                          .a_m_major = false,
                          .b_n_major = !w_col_major,
                          .m = rows,
                          .n = n,
                          .k = n,
                          .a = {tl_data(x), ldx, 0},
                          .b = {tl_data(w), ldw, 0}};
    return true;
}

static tl_status cuda_matmul_inplace(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    tl_hopper_gemm g;
    const int device = tl_tensor_device(x).index;
    if ((x->dtype == TL_BF16 || x->dtype == TL_F16) && tl_hopper_gemm_enabled() &&
        hopper_of(x, w, &g) && tl_hopper_gemm_takes(device, &g)) {
        cudaStream_t stream;
        TL_TRY(tl_cuda_stream(device, OP_NAME, &stream));
        TL_TRY(tl_hopper_gemm_run(device, stream, &g, OP_NAME));
        tl_variant_ran(&inplace_paths[0], x->dtype);
        return TL_OK;
    }
    /* recorded first: the tiles' GEMMs and copies are traced events of their own */
    tl_variant_ran(&inplace_paths[1], x->dtype);
    return tl_matmul_inplace_tiles(x, w, workspace);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(matmul_inplace, TL_DTYPES_FLOATING, matmul_inplace, cuda_matmul_inplace),
};

TL_KERNEL_TABLE(tl_cuda_matmul_inplace_table, TL_DEVICE_CUDA, entries);
