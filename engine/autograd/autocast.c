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

static bool eligible(const tl_tensor *t, tl_dtype target) {
    return t && tl_dtype_is_floating(t->dtype) && t->dtype != TL_F64 && t->dtype != target;
}

tl_status tl_autocast_operands(tl_autocast_policy policy, int n, tl_tensor **operands,
                               bool *owned) {
    for (int i = 0; i < n; i++) owned[i] = false;
    if (!current.enabled) return TL_OK;
    tl_dtype target = policy == TL_AUTOCAST_LOWER ? current.dtype : TL_F32;
    for (int i = 0; i < n; i++) {
        if (!eligible(operands[i], target)) continue;
        if (policy == TL_AUTOCAST_FLOAT && operands[i]->dtype == TL_F32) continue;
        tl_tensor *cast;
        tl_status status = tl_ag_cast(operands[i], target, &cast);
        if (status != TL_OK) {
            tl_autocast_release(i, operands, owned);
            return status;
        }
        operands[i] = cast;
        owned[i] = true;
    }
    return TL_OK;
}

void tl_autocast_release(int n, tl_tensor **operands, const bool *owned) {
    for (int i = 0; i < n; i++)
        if (owned[i]) tl_release(operands[i]);
}
