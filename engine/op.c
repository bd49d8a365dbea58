/* Per-op facts, generated from ops.def. */
#include <string.h>

#include "kernels/op.h"

static const tl_op_info op_infos[TL_OP_COUNT] = {
#define OP(name, family, differentiable, backward)                                                 \
    [TL_OP_##name] = {#name, TL_FAMILY_##family, #family, differentiable, TL_BACKWARD_##backward},
#include "tlua/ops.def"
#undef OP
};

const tl_op_info *tl_op_info_of(tl_op op) {
    return &op_infos[op];
}

tl_op tl_op_by_name(const char *name) {
    for (int op = 0; op < TL_OP_COUNT; op++)
        if (strcmp(op_infos[op].name, name) == 0) return (tl_op)op;
    return TL_OP_COUNT;
}
