/* The op and family enums and per-op facts (family, differentiable, backward), all from ops.def. */
#ifndef TLUA_OP_H
#define TLUA_OP_H

#include <stdbool.h>

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
} tl_op_info;

const tl_op_info *tl_op_info_of(tl_op op);
/* The op named name, or TL_OP_COUNT. */
tl_op tl_op_by_name(const char *name);
/* The family's name as written in ops.def ("LAYER_NORM"), "unknown" out of range. */
const char *tl_op_family_name(tl_op_family family);

#endif
