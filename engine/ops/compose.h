/* Internal: the ops a composite shape op is made of, plain or recording, so each composition
   is written once (ops/shape.c, ops/pad.c) and autograd reuses it with recorded ops. */
#ifndef TLUA_OPS_COMPOSE_H
#define TLUA_OPS_COMPOSE_H

#include "tlua/ops.h"

/* The steps of a composition: tl_plain_composer holds the functional ops (tlua/ops.h), the
   autograd layer's table their recording forms (tl_ag_*), so a composition run through the
   latter gets its gradient from the steps it took. A step that fails leaves *out NULL (the
   composition releases what it holds, *out among it when that was a step's result). */
typedef struct tl_composer {
    tl_status (*narrow)(tl_tensor *t, int dim, int64_t start, int64_t length, tl_tensor **out);
    tl_status (*reshape)(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
    tl_status (*expand)(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
    tl_status (*clone)(tl_tensor *t, tl_tensor **out);
    tl_status (*cat)(tl_tensor *const *list, int n, int dim, tl_tensor **out);
    tl_status (*flip)(tl_tensor *t, const int *dims, int ndims, tl_tensor **out);
    tl_status (*index_select)(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out);
    tl_status (*where)(tl_tensor *cond, tl_tensor *a, tl_tensor *b, tl_tensor **out);
    tl_status (*diagonal)(tl_tensor *t, int64_t offset, int dim1, int dim2, tl_tensor **out);
    tl_status (*diag_embed)(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out);
} tl_composer;

extern const tl_composer tl_plain_composer;

/* The compositions behind tl_tril/tl_triu (upper), tl_tile, tl_repeat_interleave(_counts),
   tl_diag and tl_pad's reflect, replicate and circular modes, with c's steps. */
tl_status tl_triangle_with(const tl_composer *c, tl_tensor *x, int64_t k, bool upper,
                           tl_tensor **out);
tl_status tl_tile_with(const tl_composer *c, tl_tensor *x, const int64_t *reps, int n,
                       tl_tensor **out);
tl_status tl_repeat_interleave_with(const tl_composer *c, tl_tensor *x, int64_t repeats, int dim,
                                    bool flatten, tl_tensor **out);
tl_status tl_repeat_interleave_counts_with(const tl_composer *c, tl_tensor *x,
                                           const tl_tensor *repeats, int dim, bool flatten,
                                           tl_tensor **out);
tl_status tl_diag_with(const tl_composer *c, tl_tensor *x, int64_t k, tl_tensor **out);
tl_status tl_pad_edges_with(const tl_composer *c, tl_tensor *x, const int64_t *pads, int npads,
                            tl_pad_mode mode, tl_tensor **out);

/* Checks flip's dims against x and writes them 0-based into wrapped (ndims entries). */
tl_status tl_flip_dims(const tl_tensor *x, const int *dims, int ndims, int *wrapped);
/* roll's shifts per dim of x, each in [0, size) (shift[d], ndim entries; dims given twice add
   up), or with n == 0 the one shift of x's elements in row-major order (shift[0], in
   [0, numel)). */
tl_status tl_roll_shifts(const tl_tensor *x, const int64_t *shifts, const int *dims, int n,
                         int64_t *shift);
/* roll by those normalized shifts (flat: the row-major one). */
tl_status tl_roll_normalized(tl_tensor *x, const int64_t *shift, bool flat, tl_tensor **out);

#endif
