/* Internal: overflow-checked size arithmetic, the one place sizes are computed (counts, bytes,
 * ranges, windows). */
#ifndef TLUA_SIZE_H
#define TLUA_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "tlua/tensor.h"

/* The largest element count (and the largest product of a shape's sizes,
   zero sizes counted as 1, so contiguous strides fit too) a tensor may have:
   2^62, so that element offsets and byte offsets of any dtype stay in int64. */
#define TL_MAX_NUMEL ((int64_t)1 << 62)

/* a * b and a + b for sizes >= 0: false when the result exceeds TL_MAX_NUMEL. */
bool tl_size_mul(int64_t a, int64_t b, int64_t *out);
bool tl_size_add(int64_t a, int64_t b, int64_t *out);

/* Checks a shape (ndim in 0..TL_MAX_DIMS, every size >= 0, the product of the
   sizes with zeros counted as 1 at most TL_MAX_NUMEL) and gives its element
   count. The error names op: "op: shape [...] has too many elements". */
tl_status tl_shape_numel(const char *op, const int64_t *shape, int ndim, int64_t *numel);

/* numel elements of dtype in bytes, checked against SIZE_MAX and TL_MAX_NUMEL. */
tl_status tl_size_bytes(const char *op, int64_t numel, tl_dtype dtype, size_t *bytes);

/* Checks that [start, start + length) lies within [0, size) without forming an
   overflowing sum (start, length may be any int64). */
bool tl_range_within(int64_t start, int64_t length, int64_t size);

/* Output size of a sliding window (convolution, pooling) along one dim:
   floor((in + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, with every
   step checked. Fails naming op and what (e.g. "height") when an argument is
   out of range (kernel, stride, dilation >= 1, padding >= 0) or the window does
   not fit (the result would be < 1). ceil_mode rounds up, as pooling allows. */
tl_status tl_window_out_size(const char *op, const char *what, int64_t in, int64_t kernel,
                             int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode,
                             int64_t *out);

#endif
