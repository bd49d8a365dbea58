/* The gradients of the pointwise ops of two and three inputs (families POINTWISE_BINARY and
   POINTWISE_TERNARY in tlua/ops.def), one formula per op, at the output's shape; their
   recording wrappers tl_ag_<name> (and in place) are generated from the op table, summing each
   gradient back over the dims its input was broadcast along. */
#include "autograd/formula.h"

/* ---- pointwise binary ops ------------------------------------------------------------------
   GRADIENT2(name, save_a, save_b) { ... } defines the gradients of the two-input op `name`:
   g is the gradient of its output; need[0], need[1] say which of ga (for a), gb (for b) to set,
   at the output's shape (the generated code sums each back to its input's shape). a and b are
   the inputs, saved when save_a / save_b (expressions of need) hold, else NULL. */
#define GRADIENT2(name, save_a, save_b)                                                            \
    static void name##_saves(const bool *need, bool *save) {                                       \
        (void)need;                                                                                \
        save[0] = (save_a);                                                                        \
        save[1] = (save_b);                                                                        \
    }                                                                                              \
    static tl_status name##_gradient2(const tl_tensor *g, const tl_tensor *a, const tl_tensor *b,  \
                                      const bool *need, tl_tensor **ga, tl_tensor **gb)

/* d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b */
GRADIENT2(div, need[1], true) {
    if (need[0]) TL_TRY(tl_div(g, b, ga));
    if (!need[1]) return TL_OK;
    tl_tensor *g_over_b = NULL, *quotient = NULL, *product = NULL;
    tl_status status = tl_div(g, b, &g_over_b);
    if (status == TL_OK) status = tl_div(a, b, &quotient);
    if (status == TL_OK) status = tl_mul(g_over_b, quotient, &product);
    if (status == TL_OK) status = tl_neg(product, gb);
    tl_release(g_over_b), tl_release(quotient), tl_release(product);
    return status;
}

/* atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
GRADIENT2(atan2, true, true) {
    tl_tensor *aa = NULL, *bb = NULL, *r2 = NULL, *g_over = NULL, *neg_a = NULL;
    tl_status status = tl_mul(a, a, &aa);
    if (status == TL_OK) status = tl_mul(b, b, &bb);
    if (status == TL_OK) status = tl_add(aa, bb, &r2);
    if (status == TL_OK) status = tl_div(g, r2, &g_over);
    if (status == TL_OK && need[0]) status = tl_mul(g_over, b, ga);
    if (status == TL_OK && need[1]) status = tl_neg(a, &neg_a);
    if (status == TL_OK && need[1]) status = tl_mul(g_over, neg_a, gb);
    tl_release(aa), tl_release(bb), tl_release(r2), tl_release(g_over), tl_release(neg_a);
    return status;
}

/* hypot(a, b) = r: d/da = a / r, d/db = b / r */
GRADIENT2(hypot, true, true) {
    tl_tensor *r = NULL, *g_over = NULL;
    tl_status status = tl_hypot(a, b, &r);
    if (status == TL_OK) status = tl_div(g, r, &g_over);
    if (status == TL_OK && need[0]) status = tl_mul(g_over, a, ga);
    if (status == TL_OK && need[1]) status = tl_mul(g_over, b, gb);
    tl_release(r), tl_release(g_over);
    return status;
}

/* copysign(a, b): d/da = copysign(a, b) / a (+-1), 0 where a = 0 (as torch); d/db = 0 */
GRADIENT2(copysign, need[0], need[0]) {
    if (need[1]) TL_TRY(tl_zeros(g->shape, g->ndim, g->dtype, tl_tensor_device(g), gb));
    if (!need[0]) return TL_OK;
    tl_tensor *r = NULL, *ratio = NULL, *nonzero = NULL, *zero = NULL, *scaled = NULL;
    tl_status status = tl_copysign(a, b, &r);
    if (status == TL_OK) status = tl_div(r, a, &ratio);
    if (status == TL_OK) status = tl_zeros(NULL, 0, a->dtype, tl_tensor_device(a), &zero);
    if (status == TL_OK) status = tl_ne(a, zero, &nonzero);
    if (status == TL_OK) status = tl_mul(g, ratio, &scaled);
    if (status == TL_OK) status = tl_mask_or_zero(nonzero, scaled, ga);
    tl_release(r), tl_release(ratio), tl_release(nonzero), tl_release(zero), tl_release(scaled);
    return status;
}

/* xlogy(a, b) = a log(b): d/da = log(b), 0 where a = 0 and b <= 0 (as torch); d/db = a / b */
GRADIENT2(xlogy, true, true) {
    tl_status status = TL_OK;
    if (need[0]) {
        tl_tensor *glog = NULL, *zero = NULL, *a_zero = NULL, *b_low = NULL, *both = NULL,
                  *kept = NULL;
        status = tl_xlogy(g, b, &glog);
        if (status == TL_OK) status = tl_zeros(NULL, 0, a->dtype, tl_tensor_device(a), &zero);
        if (status == TL_OK) status = tl_eq(a, zero, &a_zero);
        if (status == TL_OK) status = tl_le(b, zero, &b_low);
        if (status == TL_OK) status = tl_logical_and(a_zero, b_low, &both);
        if (status == TL_OK) status = tl_logical_not(both, &kept);
        if (status == TL_OK) status = tl_mask_or_zero(kept, glog, ga);
        tl_release(glog), tl_release(zero), tl_release(a_zero), tl_release(b_low);
        tl_release(both), tl_release(kept);
    }
    if (status == TL_OK && need[1]) {
        tl_tensor *ga_b = NULL;
        status = tl_mul(g, a, &ga_b);
        if (status == TL_OK) status = tl_div(ga_b, b, gb);
        tl_release(ga_b);
    }
    return status;
}

/* The larger (larger) or smaller of a and b: the gradient goes to the one chosen, half to each
   on a tie (torch's rule). maximum and minimum: a NaN gives the gradient to both (as torch);
   fmax and fmin (ignore_nan): a NaN loses to a number. */
static tl_status extreme_gradient(const tl_tensor *g, const tl_tensor *a, const tl_tensor *b,
                                  const bool *need, tl_tensor **ga, tl_tensor **gb, bool larger,
                                  bool ignore_nan) {
    tl_tensor *tie = NULL, *half_g = NULL, *shared = NULL;
    tl_tensor *beaten[2] = {NULL, NULL}, *nan[2] = {NULL, NULL}, *number[2] = {NULL, NULL};
    tl_tensor *nan_loses[2] = {NULL, NULL}, *loses[2] = {NULL, NULL}, *wins[2] = {NULL, NULL};
    const tl_tensor *in[2] = {a, b};
    tl_tensor **out[2] = {ga, gb};
    tl_status status = tl_eq(a, b, &tie);
    if (status == TL_OK) status = tl_mul_number(g, 0.5, &half_g);
    if (status == TL_OK) status = tl_where(tie, half_g, g, &shared);
    for (int i = 0; i < 2 && status == TL_OK; i++) {
        if (!need[i]) continue;
        /* input i loses where the other is larger (smaller), or, ignoring NaN, where it is NaN
           and the other is not */
        const tl_tensor *self = in[i], *other = in[1 - i];
        status = larger ? tl_lt(self, other, &beaten[i]) : tl_gt(self, other, &beaten[i]);
        if (status == TL_OK && ignore_nan) {
            status = tl_isnan(self, &nan[i]);
            tl_tensor *other_nan = NULL;
            if (status == TL_OK) status = tl_isnan(other, &other_nan);
            if (status == TL_OK) status = tl_logical_not(other_nan, &number[i]);
            if (status == TL_OK) status = tl_logical_and(nan[i], number[i], &nan_loses[i]);
            if (status == TL_OK) status = tl_logical_or(beaten[i], nan_loses[i], &loses[i]);
            tl_release(other_nan);
        } else if (status == TL_OK) {
            loses[i] = tl_retain(beaten[i]);
        }
        if (status == TL_OK) status = tl_logical_not(loses[i], &wins[i]);
        if (status == TL_OK) status = tl_mask_or_zero(wins[i], shared, out[i]);
    }
    tl_release(tie), tl_release(half_g), tl_release(shared);
    for (int i = 0; i < 2; i++) {
        tl_release(beaten[i]), tl_release(nan[i]), tl_release(number[i]);
        tl_release(nan_loses[i]), tl_release(loses[i]), tl_release(wins[i]);
    }
    return status;
}
GRADIENT2(maximum, true, true) {
    return extreme_gradient(g, a, b, need, ga, gb, true, false);
}
GRADIENT2(minimum, true, true) {
    return extreme_gradient(g, a, b, need, ga, gb, false, false);
}
GRADIENT2(fmax, true, true) {
    return extreme_gradient(g, a, b, need, ga, gb, true, true);
}
GRADIENT2(fmin, true, true) {
    return extreme_gradient(g, a, b, need, ga, gb, false, true);
}

/* a - b q: d/da = 1, d/db = -q, q = trunc(a / b) (fmod) or floor(a / b) (remainder) */
static tl_status modulo_gradient(const tl_tensor *g, const tl_tensor *a, const tl_tensor *b,
                                 const bool *need, tl_tensor **ga, tl_tensor **gb, bool floored) {
    if (need[0]) *ga = tl_retain((tl_tensor *)g);
    if (!need[1]) return TL_OK;
    tl_tensor *quotient = NULL, *q = NULL, *gq = NULL;
    tl_status status = floored ? tl_floor_divide(a, b, &q) : tl_div(a, b, &quotient);
    if (status == TL_OK && !floored) status = tl_trunc(quotient, &q);
    if (status == TL_OK) status = tl_mul(g, q, &gq);
    if (status == TL_OK) status = tl_neg(gq, gb);
    tl_release(quotient), tl_release(q), tl_release(gq);
    return status;
}
GRADIENT2(fmod, need[1], need[1]) {
    return modulo_gradient(g, a, b, need, ga, gb, false);
}
GRADIENT2(remainder, need[1], need[1]) {
    return modulo_gradient(g, a, b, need, ga, gb, true);
}

/* ---- pointwise ternary ops -----------------------------------------------------------------
   GRADIENT3(name, save_a, save_b, save_c) { ... }: as GRADIENT2 with a third input c (gc) and
   p, the op's numbers as the forward resolved them. */
#define GRADIENT3(name, save_a, save_b, save_c)                                                    \
    static void name##_saves(const bool *need, bool *save) {                                       \
        (void)need;                                                                                \
        save[0] = (save_a);                                                                        \
        save[1] = (save_b);                                                                        \
        save[2] = (save_c);                                                                        \
    }                                                                                              \
    static tl_status name##_gradient3(const tl_tensor *g, const tl_tensor *a, const tl_tensor *b,  \
                                      const tl_tensor *c, const double *p, const bool *need,       \
                                      tl_tensor **ga, tl_tensor **gb, tl_tensor **gc)

/* lerp(a, b, w) = a + w (b - a): d/da = 1 - w, d/db = w, d/dw = b - a */
GRADIENT3(lerp, need[2], need[2], need[0] || need[1]) {
    (void)p;
    tl_status status = TL_OK;
    tl_tensor *gw = NULL, *difference = NULL;
    if (need[0] || need[1]) status = tl_mul(g, c, &gw);
    if (status == TL_OK && need[0]) status = tl_sub(g, gw, ga);
    if (status == TL_OK && need[1]) *gb = tl_retain(gw);
    if (status == TL_OK && need[2]) status = tl_sub(b, a, &difference);
    if (status == TL_OK && need[2]) status = tl_mul(g, difference, gc);
    tl_release(gw), tl_release(difference);
    return status;
}

/* addcmul(a, b, c) = a + v b c: d/da = 1, d/db = v c, d/dc = v b */
GRADIENT3(addcmul, false, need[2], need[1]) {
    (void)a;
    if (need[0]) *ga = tl_retain((tl_tensor *)g);
    tl_tensor *gv = NULL;
    tl_status status = need[1] || need[2] ? tl_mul_number(g, p[0], &gv) : TL_OK;
    if (status == TL_OK && need[1]) status = tl_mul(gv, c, gb);
    if (status == TL_OK && need[2]) status = tl_mul(gv, b, gc);
    tl_release(gv);
    return status;
}

/* addcdiv(a, b, c) = a + v b / c: d/da = 1, d/db = v / c, d/dc = -v b / c^2 */
GRADIENT3(addcdiv, false, need[2], need[1] || need[2]) {
    (void)a;
    if (need[0]) *ga = tl_retain((tl_tensor *)g);
    tl_tensor *gv = NULL, *gv_c = NULL, *quotient = NULL, *product = NULL;
    tl_status status = need[1] || need[2] ? tl_mul_number(g, p[0], &gv) : TL_OK;
    if (status == TL_OK && (need[1] || need[2])) status = tl_div(gv, c, &gv_c);
    if (status == TL_OK && need[1]) *gb = tl_retain(gv_c);
    if (status == TL_OK && need[2]) status = tl_div(b, c, &quotient);
    if (status == TL_OK && need[2]) status = tl_mul(gv_c, quotient, &product);
    if (status == TL_OK && need[2]) status = tl_neg(product, gc);
    tl_release(gv), tl_release(gv_c), tl_release(quotient), tl_release(product);
    return status;
}

/* clamp_tensor(x, lo, hi): the gradient goes to x where lo <= x <= hi, to lo where x < lo < hi,
   to hi where x > hi or hi < lo (torch's rule for tensor bounds) */
GRADIENT3(clamp_tensor, true, true, true) {
    (void)p;
    tl_tensor *above_lo = NULL, *below_hi = NULL, *inside = NULL, *below = NULL, *ordered = NULL,
              *to_lo = NULL, *above = NULL, *crossed = NULL, *to_hi = NULL;
    tl_status status = TL_OK;
    if (need[0]) {
        status = tl_ge(a, b, &above_lo);
        if (status == TL_OK) status = tl_le(a, c, &below_hi);
        if (status == TL_OK) status = tl_logical_and(above_lo, below_hi, &inside);
        if (status == TL_OK) status = tl_mask_or_zero(inside, g, ga);
    }
    if (status == TL_OK && need[1]) {
        status = tl_lt(a, b, &below);
        if (status == TL_OK) status = tl_lt(b, c, &ordered);
        if (status == TL_OK) status = tl_logical_and(below, ordered, &to_lo);
        if (status == TL_OK) status = tl_mask_or_zero(to_lo, g, gb);
    }
    if (status == TL_OK && need[2]) {
        status = tl_gt(a, c, &above);
        if (status == TL_OK) status = tl_lt(c, b, &crossed);
        if (status == TL_OK) status = tl_logical_or(above, crossed, &to_hi);
        if (status == TL_OK) status = tl_mask_or_zero(to_hi, g, gc);
    }
    tl_release(above_lo), tl_release(below_hi), tl_release(inside), tl_release(below);
    tl_release(ordered), tl_release(to_lo), tl_release(above), tl_release(crossed);
    tl_release(to_hi);
    return status;
}

/* ---- generated: the backward function and tl_ag_<name> of every POINTWISE_BINARY row ---- */
#define POINTWISE_BINARY_AUTOGRAD_true(name)                                                       \
    static tl_status name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {         \
        bool save[2];                                                                              \
        name##_saves(node->needs_input_grad, save);                                                \
        tl_tensor *saved[2] = {NULL, NULL};                                                        \
        for (int i = 0; i < 2; i++)                                                                \
            if (save[i]) TL_TRY(tl_node_saved(node, i, &saved[i]));                                \
        TL_TRY(                                                                                    \
            name##_gradient2(g[0], saved[0], saved[1], node->needs_input_grad, &gi[0], &gi[1]));   \
        for (int i = 0; i < 2; i++)                                                                \
            if (gi[i]) TL_TRY(tl_reduce_to_input(node, i, TL_OK, gi));                             \
        return TL_OK;                                                                              \
    }                                                                                              \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor *b, tl_tensor **out) {                          \
        TL_TRY(tl_##name(a, b, out));                                                              \
        static const char *const what[2] = {"self", "other"};                                      \
        return tl_record_inputs(#name, name##_backward, 2, (tl_tensor *[]){a, b}, what,            \
                                name##_saves, out, NULL);                                          \
    }                                                                                              \
    tl_status tl_ag_##name##_(tl_tensor *x, tl_tensor *other) {                                    \
        return tl_binary_inplace(#name "_", name##_backward, name##_saves, tl_##name##_, x,        \
                                 other);                                                           \
    }
/* a row without a gradient records nothing; in place, x's old values get none (as fill_'s) */
static tl_status no_gradient(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node, (void)g, (void)gi;
    return TL_OK;
}
#define POINTWISE_BINARY_AUTOGRAD_false(name)                                                      \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor *b, tl_tensor **out) {                          \
        return tl_##name(a, b, out);                                                               \
    }                                                                                              \
    tl_status tl_ag_##name##_(tl_tensor *x, tl_tensor *other) {                                    \
        tl_node *node;                                                                             \
        TL_TRY(tl_inplace_begin(#name "_", no_gradient, x, 0, NULL, &node));                       \
        return tl_inplace_end(node, tl_##name##_(x, other), x);                                    \
    }
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    POINTWISE_BINARY_AUTOGRAD_##differentiable(name)
#include "tlua/ops.def"

/* ---- generated: the same for every POINTWISE_TERNARY row, the node keeping the numbers ---- */
#define POINTWISE_TERNARY_AUTOGRAD(name)                                                           \
    static tl_status name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {         \
        bool save[3];                                                                              \
        name##_saves(node->needs_input_grad, save);                                                \
        tl_tensor *saved[3] = {NULL, NULL, NULL};                                                  \
        for (int i = 0; i < 3; i++)                                                                \
            if (save[i]) TL_TRY(tl_node_saved(node, i, &saved[i]));                                \
        TL_TRY(name##_gradient3(g[0], saved[0], saved[1], saved[2], node->scalar,                  \
                                node->needs_input_grad, &gi[0], &gi[1], &gi[2]));                  \
        for (int i = 0; i < 3; i++)                                                                \
            if (gi[i]) TL_TRY(tl_reduce_to_input(node, i, TL_OK, gi));                             \
        return TL_OK;                                                                              \
    }                                                                                              \
    tl_status tl_ag_##name##_with(tl_tensor *a, tl_tensor *b, tl_tensor *c, const double *numbers, \
                                  tl_tensor **out) {                                               \
        TL_TRY(tl_##name##_with(a, b, c, numbers, out));                                           \
        static const char *const what[3] = {"a", "b", "c"};                                        \
        tl_node *node;                                                                             \
        TL_TRY(tl_record_inputs(#name, name##_backward, 3, (tl_tensor *[]){a, b, c}, what,         \
                                name##_saves, out, &node));                                        \
        if (node) tl_op_numbers(TL_OP_##name, (*out)->dtype, numbers, node->scalar);               \
        return TL_OK;                                                                              \
    }
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    POINTWISE_TERNARY_AUTOGRAD(name)
#include "tlua/ops.def"
