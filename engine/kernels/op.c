/* Per-op facts, generated from ops.def. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/op.h"
#include "tlua/trace.h"

#define INFO(name, family, differentiable, backward, dtypes, spec)                                 \
    [TL_OP_##name] = {                                                                             \
        #name, TL_FAMILY_##family, #family, differentiable, TL_BACKWARD_##backward, dtypes, spec},
static const tl_op_info op_infos[TL_OP_COUNT] = {
#define OP(name, family, differentiable, backward)                                                 \
    INFO(name, family, differentiable, backward, NULL, NULL)
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    INFO(name, POINTWISE, differentiable, backward, #dtypes, spec)
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    INFO(name, POINTWISE_BINARY, differentiable, backward, #dtypes, "")
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    INFO(name, POINTWISE_TERNARY, differentiable, backward, #dtypes, spec)
#include "tlua/ops.def"
#undef OP
};

/* The words of a row's numbers: "name=default" separated by spaces. */
static int number_words(const char *text, const char *names[TL_OP_MAX_NUMBERS],
                        int lengths[TL_OP_MAX_NUMBERS], const char *defaults[TL_OP_MAX_NUMBERS]) {
    int count = 0;
    for (const char *p = text ? text : ""; *p && count < TL_OP_MAX_NUMBERS;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *equals = strchr(p, '=');
        if (!equals) break;
        names[count] = p;
        lengths[count] = (int)(equals - p);
        defaults[count] = equals + 1;
        count++;
        p = equals + 1;
        while (*p && *p != ' ') p++;
    }
    return count;
}

int tl_op_number_names(tl_op op, const char *names[TL_OP_MAX_NUMBERS],
                       int lengths[TL_OP_MAX_NUMBERS]) {
    const char *defaults[TL_OP_MAX_NUMBERS];
    return number_words(op_infos[op].numbers, names, lengths, defaults);
}

/* the largest finite value of dtype (the integers': their largest) */
static double largest_finite(tl_dtype dtype) {
    switch (dtype) {
    case TL_F64:
        return DBL_MAX;
    case TL_BF16:
        return 3.38953138925153547590470800371487866880e38; /* (2 - 2^-7) 2^127 */
    case TL_F16:
        return 65504.0;
    case TL_I32:
        return 2147483647.0;
    case TL_I64:
        return 9223372036854775807.0;
    default:
        return FLT_MAX;
    }
}

void tl_op_numbers(tl_op op, tl_dtype dtype, const double *given,
                   double resolved[TL_OP_MAX_NUMBERS]) {
    const char *names[TL_OP_MAX_NUMBERS], *defaults[TL_OP_MAX_NUMBERS];
    int lengths[TL_OP_MAX_NUMBERS];
    int count = number_words(op_infos[op].numbers, names, lengths, defaults);
    for (int i = 0; i < TL_OP_MAX_NUMBERS; i++) {
        resolved[i] = 0;
        if (i >= count) continue;
        if (given && !isnan(given[i])) {
            resolved[i] = given[i];
        } else if (strncmp(defaults[i], "none", 4) == 0) {
            resolved[i] = NAN;
        } else if (strncmp(defaults[i], "largest", 7) == 0) {
            resolved[i] = largest_finite(dtype);
        } else if (strncmp(defaults[i], "lowest", 6) == 0) {
            resolved[i] = dtype == TL_I32   ? -2147483648.0
                          : dtype == TL_I64 ? -9223372036854775808.0
                                            : -largest_finite(dtype);
        } else {
            resolved[i] = strtod(defaults[i], NULL);
        }
    }
}

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

bool tl_family_device_only(tl_op_family family) {
    static const bool device_only[TL_FAMILY_COUNT + 1] = {
#define DEVICE_ONLY(family, device) [TL_FAMILY_##family] = true,
#include "tlua/ops.def"
#undef DEVICE_ONLY
    };
    return (unsigned)family < TL_FAMILY_COUNT && device_only[family];
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
                                      .backward = backward_name(op_infos[op].backward),
                                      .dtypes = op_infos[op].dtypes,
                                      .numbers = op_infos[op].numbers};
    }
    return TL_OP_COUNT;
}
