/* CPU matmul_inplace: OpenBLAS GEMMs by tiles, each copied back before the next (one buffer). */
#include <string.h>

#include "kernels/matmul_inplace.h"

static tl_status copy_rows(int device, int slot, void *dst, size_t dpitch, const void *src,
                           size_t spitch, size_t width, size_t height) {
    (void)device, (void)slot;
#pragma omp parallel for if (width * height > ((size_t)1 << 20))
    for (size_t r = 0; r < height; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return TL_OK;
}

static tl_status copied(int device, int slot) {
    (void)device, (void)slot;
    return TL_OK;
}

static tl_status cpu_matmul_inplace(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    const tl_tile_copier copier = {.device = 0, .copy = copy_rows, .wait = copied};
    return tl_matmul_inplace_tiles(x, w, workspace, &copier);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(matmul_inplace, TL_DTYPES_FLOATING, matmul_inplace, cpu_matmul_inplace),
};

TL_KERNEL_TABLE(tl_cpu_matmul_inplace_table, TL_DEVICE_CPU, entries);
