/* CUDA matmul_inplace: cuBLAS GEMMs by tiles on the device's stream, each tile copied back on
   the device's copy stream while the next tile's GEMM runs (two workspace buffers). */
#include "core/cuda/cuda_runtime.h"
#include "kernels/matmul_inplace.h"

static tl_status copy_after(int device, int slot, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t height) {
    return tl_cuda_copy_2d_after(device, slot, dst, dpitch, src, spitch, width, height,
                                 "matmul_inplace");
}

static tl_status wait_copy(int device, int slot) {
    return tl_cuda_copy_wait(device, slot, "matmul_inplace");
}

static tl_status cuda_matmul_inplace(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    const tl_tile_copier copier = {
        .device = x->storage->device.index, .copy = copy_after, .wait = wait_copy};
    return tl_matmul_inplace_tiles(x, w, workspace, &copier);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(matmul_inplace, TL_DTYPES_FLOATING, matmul_inplace, cuda_matmul_inplace),
};

TL_KERNEL_TABLE(tl_cuda_matmul_inplace_table, TL_DEVICE_CUDA, entries);
