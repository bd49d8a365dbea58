/* CPU matmul_inplace: OpenBLAS GEMMs by tiles, each copied back before the next (one buffer). */
#include "kernels/matmul_inplace.h"

static tl_status cpu_matmul_inplace(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    return tl_matmul_inplace_tiles(x, w, workspace);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(matmul_inplace, TL_DTYPES_FLOATING, matmul_inplace, cpu_matmul_inplace),
};

TL_KERNEL_TABLE(tl_cpu_matmul_inplace_table, TL_DEVICE_CPU, entries);
