/* The op and family enums and per-op facts (family, differentiable, backward), all from ops.def. */
#ifndef TLUA_OP_H
#define TLUA_OP_H

#include <stdbool.h>

#include "tlua/dtype.h"

typedef enum tl_op {
#define OP(name, family, differentiable, backward) TL_OP_##name,
#include "tlua/ops.def"
#undef OP
    TL_OP_COUNT
} tl_op;

/* The op families: the FAMILY rows of ops.def, each with its kernel signature. */
typedef enum tl_op_family {
#define FAMILY(name, signature) TL_FAMILY_##name,
#include "tlua/ops.def"
#undef FAMILY
    TL_FAMILY_COUNT
} tl_op_family;

typedef enum tl_backward_kind {
    TL_BACKWARD_NONE,
    TL_BACKWARD_KERNELS,
    TL_BACKWARD_COMPOSED,
} tl_backward_kind;

typedef struct tl_op_info {
    const char *name;
    tl_op_family family;
    const char *family_name; /* as written in ops.def */
    bool differentiable;
    tl_backward_kind backward;
    /* pointwise rows (POINTWISE_OP, _BINARY_OP, _TERNARY_OP): their dtypes rule ("INT") and
       numbers ("min_val=-1 max_val=1"); NULL for other ops, numbers "" for none */
    const char *dtypes;
    const char *numbers;
} tl_op_info;

/* The most numbers a pointwise row names. */
#define TL_OP_MAX_NUMBERS 3

/* The names of op's numbers (names[i] of length lengths[i], not terminated, pointing into the
   row's text); returns their count (0 for an op without). */
int tl_op_number_names(tl_op op, const char *names[TL_OP_MAX_NUMBERS],
                       int lengths[TL_OP_MAX_NUMBERS]);
/* op's numbers as its kernels get them: given[i] (given may be NULL: none) where it is not NaN,
   else the row's default; `none` stays NaN, `largest` and `lowest` become dtype's finite range.
   Unnamed entries are 0. */
void tl_op_numbers(tl_op op, tl_dtype dtype, const double *given,
                   double resolved[TL_OP_MAX_NUMBERS]);

const tl_op_info *tl_op_info_of(tl_op op);
/* The op named name, or TL_OP_COUNT. */
tl_op tl_op_by_name(const char *name);
/* The family's name as written in ops.def ("LAYER_NORM"), "unknown" out of range. */
const char *tl_op_family_name(tl_op_family family);
/* Whether family's kernels exist on one device only (a DEVICE_ONLY row of ops.def: a library's,
   such as cuDNN's convolutions), so its ops have no CPU kernel. */
bool tl_family_device_only(tl_op_family family);

#endif
