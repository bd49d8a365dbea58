/* Autocast (per thread): inside a region, GEMM-like ops run in bfloat16/float16 (f32
   accumulation in their kernels) and precision-sensitive ops in float32; the casts are recorded
   ops, so gradients reach float32 parameters in their own dtype. */
#include "autograd/autocast.h"

static _Thread_local tl_autocast_state current;

tl_autocast_state tl_autocast_get(void) {
    return current;
}

tl_status tl_autocast_set(tl_autocast_state state, tl_autocast_state *previous) {
    if (state.enabled && state.dtype != TL_BF16 && state.dtype != TL_F16)
        return tl_error(TL_ERR_DTYPE, "autocast: dtype must be bfloat16 or float16, got %s",
                        tl_dtype_name(state.dtype));
    if (previous) *previous = current;
    current = state;
    if (!current.enabled) current.dtype = TL_F32;
    return TL_OK;
}

/* What a family's recording ops do to their operands: its AUTOCAST row of ops.def. */
typedef enum autocast_rule {
    AUTOCAST_KEEP,  /* no row: compute in the inputs' dtype */
    AUTOCAST_LOWER, /* float32 (and the other 16-bit type) -> the autocast dtype */
    AUTOCAST_FLOAT, /* bfloat16/float16 -> float32 */
} autocast_rule;

static const autocast_rule family_rules[TL_FAMILY_COUNT] = {
#define AUTOCAST(family, rule) [TL_FAMILY_##family] = AUTOCAST_##rule,
#include "tlua/ops.def"
#undef AUTOCAST
};

/* The dtype t is cast to under rule, or t's own when the rule leaves it (float64 never moves). */
static tl_dtype target_of(autocast_rule rule, const tl_tensor *t) {
    if (!t || !tl_dtype_is_floating(t->dtype) || t->dtype == TL_F64) return t ? t->dtype : TL_F32;
    if (rule == AUTOCAST_LOWER) return current.dtype;
    if (rule == AUTOCAST_FLOAT) return TL_F32;
    return t->dtype;
}

tl_status tl_autocast_operands(tl_op op, tl_tensor **operands, int n, bool *casted) {
    for (int i = 0; i < n; i++) casted[i] = false;
    if (!current.enabled) return TL_OK;
    const autocast_rule rule = family_rules[tl_op_info_of(op)->family];
    for (int i = 0; i < n; i++) {
        const tl_dtype target = target_of(rule, operands[i]);
        if (!operands[i] || target == operands[i]->dtype) continue;
        tl_tensor *cast;
        tl_status status = tl_ag_cast(operands[i], target, &cast);
        if (status != TL_OK) return tl_autocast_release(operands, i, casted, status);
        operands[i] = cast;
        casted[i] = true;
    }
    return TL_OK;
}

tl_status tl_autocast_parameters(tl_op op, tl_tensor **params, int n, bool *casted) {
    const bool grad_mode = tl_set_grad_enabled(false);
    tl_status status = tl_autocast_operands(op, params, n, casted);
    tl_set_grad_enabled(grad_mode);
    return status;
}

tl_status tl_autocast_release(tl_tensor **operands, int n, const bool *casted, tl_status status) {
    for (int i = 0; i < n; i++)
        if (casted[i]) tl_release(operands[i]);
    return status;
}
