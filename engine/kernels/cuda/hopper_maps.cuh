/* Internal: the TMA tensor maps of the Hopper core's kernels (hopper_gemm.cu makes them for
   hopper_block_sparse.cu too). CUDA C++. */
#pragma once

#include <cuda.h>
#include <cstdint>

#include "tlua/error.h"

/* A stack of `matrices` row-major [rows, cols] 16-bit matrices (float16 when half, else
   bfloat16; ld elements between rows, stride between matrices) read or written in boxes of
   box_rows x 64, 128B-swizzled; zeros where a box leaves the bounds. op names the caller. */
tl_status tl_hopper_make_map(bool half, const void *data, int64_t rows, int64_t cols, int64_t ld,
                             int64_t matrices, int64_t stride, int box_rows, const char *op,
                             CUtensorMap *map);
