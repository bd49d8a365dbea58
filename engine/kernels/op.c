/* Per-op facts, generated from ops.def. */
#include <string.h>

#include "kernels/op.h"
#include "tlua/trace.h"

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

const char *tl_op_family_name(tl_op_family family) {
    static const char *const names[TL_FAMILY_COUNT] = {
#define FAMILY(name, signature) [TL_FAMILY_##name] = #name,
#include "tlua/ops.def"
#undef FAMILY
    };
    return (unsigned)family < TL_FAMILY_COUNT ? names[family] : "unknown";
}

static const char *backward_name(tl_backward_kind kind) {
    return kind == TL_BACKWARD_KERNELS    ? "kernels"
           : kind == TL_BACKWARD_COMPOSED ? "composed"
                                          : "none";
}

int tl_op_list(tl_op_description *out, int max) {
    /* family names in lower case, made once (ops.def writes them in upper case) */
    static char lower[TL_OP_COUNT][32];
    for (int op = 0; op < TL_OP_COUNT && op < max; op++) {
        const char *family = tl_op_family_name(op_infos[op].family);
        size_t n = 0;
        for (; family[n] && n + 1 < sizeof lower[op]; n++)
            lower[op][n] =
                (char)(family[n] >= 'A' && family[n] <= 'Z' ? family[n] - 'A' + 'a' : family[n]);
        lower[op][n] = 0;
        out[op] = (tl_op_description){.name = op_infos[op].name,
                                      .family = lower[op],
                                      .differentiable = op_infos[op].differentiable,
                                      .backward = backward_name(op_infos[op].backward)};
    }
    return TL_OP_COUNT;
}
