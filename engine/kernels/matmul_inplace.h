/* Internal: the tile loop of the matmul_inplace kernels, shared by the devices. */
#ifndef TLUA_KERNELS_MATMUL_INPLACE_H
#define TLUA_KERNELS_MATMUL_INPLACE_H

#include "kernels/kernel.h"

/* x <- x @ w as tl_matmul_inplace_kernel says: each tile's GEMM into a workspace buffer, then the
   device's copy kernel writes it back over the tile, both on the device's stream. */
tl_status tl_matmul_inplace_tiles(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace);

#endif
