/* tl_block_layout: the three indexes of a block-sparse weight's pattern, read by its kernels. */
#ifndef TLUA_BLOCK_LAYOUT_H
#define TLUA_BLOCK_LAYOUT_H

#include "tlua/tensor.h"

/* A weight W [R * b, C * b] kept as nnz blocks [nnz, b, b] (each block a row-major [b, b]
   piece of W) on a pattern of its block grid [R, C]. Every index is an int32 tensor on the
   blocks' device, counting from 0; the blocks are in row-major order of the grid.
   - row-wise index (dense x sparse^T, the forward): block row r holds the blocks
     row_offsets[r] .. row_offsets[r + 1] - 1 ([R + 1]), at block columns col_indices ([nnz],
     increasing within a row);
   - column-wise index (dense x sparse, the input gradient): block column c holds the entries
     col_offsets[c] .. col_offsets[c + 1] - 1 ([C + 1]), each at block row row_indices[t]
     (increasing within a column) and being block col_blocks[t] ([nnz] each);
   - coordinate list (dense x dense sampled on the pattern, the weight gradient): block e
     is at (coo_rows[e], coo_cols[e]) ([nnz] each).
   tl_block_layout_validate checks all of this; tlua's Lua layer builds layouts from a mask. */
typedef struct tl_block_layout {
    const tl_tensor *row_offsets, *col_indices;
    const tl_tensor *col_offsets, *row_indices, *col_blocks;
    const tl_tensor *coo_rows, *coo_cols;
} tl_block_layout;

#endif
