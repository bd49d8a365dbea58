/* CUDA matmul_inplace: cuBLAS GEMMs by tiles on the device's stream, each copied back by the
   device's copy kernel (kernels/matmul_inplace.c). */
#include "kernels/matmul_inplace.h"

static tl_status cuda_matmul_inplace(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    return tl_matmul_inplace_tiles(x, w, workspace);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(matmul_inplace, TL_DTYPES_FLOATING, matmul_inplace, cuda_matmul_inplace),
};

TL_KERNEL_TABLE(tl_cuda_matmul_inplace_table, TL_DEVICE_CUDA, entries);
