/* Internal: the tile loop of the matmul_inplace kernels, shared by the devices. */
#ifndef TLUA_KERNELS_MATMUL_INPLACE_H
#define TLUA_KERNELS_MATMUL_INPLACE_H

#include "kernels/kernel.h"

/* How a device copies a tile back: copy() writes height rows of width bytes from src (rows
   spitch bytes apart) to dst (dpitch apart), after the work queued before it; the copy of
   workspace buffer `slot` must be done before wait(slot) returns (or, on a device with streams,
   before work queued after it runs). */
typedef struct tl_tile_copier {
    int device;
    tl_status (*copy)(int device, int slot, void *dst, size_t dpitch, const void *src,
                      size_t spitch, size_t width, size_t height);
    tl_status (*wait)(int device, int slot);
} tl_tile_copier;

/* x <- x @ w as tl_matmul_inplace_kernel says, tiles alternating over the workspace's buffers:
   the GEMM of a tile may run while the tile before it is copied back. */
tl_status tl_matmul_inplace_tiles(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace,
                                  const tl_tile_copier *copier);

#endif
