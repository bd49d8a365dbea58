/* Differentiable gradients (create_graph): for each op that has one, its backward written with
   recording ops over saved tensors joined to the graph, so the gradient can be differentiated
   again (a gradient penalty, a Hessian-vector product). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "autograd/formula.h"

static const double pi = 3.14159265358979323846;

tl_status tl_graph_number_like(const tl_tensor *t, double v, tl_tensor **out) {
    return tl_full(NULL, 0, tl_scalar_float(v), t->dtype, tl_tensor_device(t), out);
}

/* t * v, recorded */
static tl_status scaled(tl_tensor *t, double v, tl_tensor **out) {
    tl_tensor *c;
    TL_TRY(tl_graph_number_like(t, v, &c));
    tl_status status = tl_ag_mul(t, c, out);
    tl_release(c);
    return status;
}

tl_status tl_graph_product3(tl_tensor *a, tl_tensor *b, tl_tensor *c, tl_tensor **out) {
    tl_tensor *ab;
    TL_TRY(tl_ag_mul(a, b, &ab));
    tl_status status = tl_ag_mul(ab, c, out);
    tl_release(ab);
    return status;
}

/* g (at the output's shape, taken) summed back over the dims broadcasting added to input i,
   recorded: the leading dims, and the dims where the input has size 1. */
static tl_status to_input(tl_node *node, int i, tl_tensor *g, tl_tensor **out) {
    const int ndim = g->ndim, in_ndim = node->input_ndim[i], lead = ndim - in_ndim;
    int dims[TL_MAX_DIMS], count = 0;
    for (int d = 0; d < ndim; d++)
        if (d < lead || (node->input_shape[i][d - lead] == 1 && g->shape[d] != 1))
            dims[count++] = d;
    if (count == 0 && lead == 0) {
        *out = g;
        return TL_OK;
    }
    tl_tensor *summed = NULL;
    tl_status status =
        count ? tl_ag_sum_dims(g, dims, count, true, 0, &summed) : (summed = tl_retain(g), TL_OK);
    tl_release(g);
    if (status == TL_OK) status = tl_ag_reshape(summed, node->input_shape[i], in_ndim, out);
    tl_release(summed);
    return status;
}

/* ---- pointwise -------------------------------------------------------------------------- */
static tl_status neg_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node;
    return tl_ag_neg(g[0], &gi[0]);
}

static tl_status add_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    for (int i = 0; i < 2; i++)
        if (node->needs_input_grad[i]) TL_TRY(to_input(node, i, tl_retain(g[0]), &gi[i]));
    return TL_OK;
}

static tl_status sub_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) TL_TRY(to_input(node, 0, tl_retain(g[0]), &gi[0]));
    if (node->needs_input_grad[1]) {
        tl_tensor *minus;
        TL_TRY(tl_ag_neg(g[0], &minus));
        TL_TRY(to_input(node, 1, minus, &gi[1]));
    }
    return TL_OK;
}

/* slot 0: a (when b's gradient is needed), slot 1: b (when a's is) */
static tl_status mul_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    for (int i = 0; i < 2; i++) {
        if (!node->needs_input_grad[i]) continue;
        tl_tensor *other, *partial = NULL;
        TL_TRY(tl_node_saved_attached(node, 1 - i, &other));
        tl_status status = tl_ag_mul(g[0], other, &partial);
        tl_release(other);
        TL_TRY(status);
        TL_TRY(to_input(node, i, partial, &gi[i]));
    }
    return TL_OK;
}

/* d(a/b)/da = 1/b, d(a/b)/db = -a/b^2; slot 0: a (when b's gradient is needed), slot 1: b */
static tl_status div_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *b, *g_over_b = NULL;
    TL_TRY(tl_node_saved_attached(node, 1, &b));
    tl_status status = tl_ag_div(g[0], b, &g_over_b);
    if (status == TL_OK && node->needs_input_grad[0])
        status = to_input(node, 0, tl_retain(g_over_b), &gi[0]);
    if (status == TL_OK && node->needs_input_grad[1]) {
        tl_tensor *a = NULL, *quotient = NULL, *partial = NULL, *minus = NULL;
        status = tl_node_saved_attached(node, 0, &a);
        if (status == TL_OK) status = tl_ag_div(a, b, &quotient);
        if (status == TL_OK) status = tl_ag_mul(g_over_b, quotient, &partial);
        if (status == TL_OK) status = tl_ag_neg(partial, &minus);
        if (status == TL_OK) status = to_input(node, 1, minus, &gi[1]);
        tl_release(a), tl_release(quotient), tl_release(partial);
    }
    tl_release(b), tl_release(g_over_b);
    return status;
}

/* d(a^b)/da = b a^(b - 1), d(a^b)/db = a^b log(a); slots a, b, result (when b's is needed) */
static tl_status pow_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *a = NULL, *b = NULL;
    tl_status status = tl_node_saved_attached(node, 0, &a);
    if (status == TL_OK) status = tl_node_saved_attached(node, 1, &b);
    if (status == TL_OK && node->needs_input_grad[0]) {
        tl_tensor *one = NULL, *b_minus_1 = NULL, *power = NULL, *partial = NULL;
        status = tl_graph_number_like(b, 1.0, &one);
        if (status == TL_OK) status = tl_ag_sub(b, one, &b_minus_1);
        if (status == TL_OK) status = tl_ag_pow(a, b_minus_1, &power);
        if (status == TL_OK) status = tl_graph_product3(g[0], b, power, &partial);
        if (status == TL_OK) status = to_input(node, 0, partial, &gi[0]);
        tl_release(one), tl_release(b_minus_1), tl_release(power);
    }
    if (status == TL_OK && node->needs_input_grad[1]) {
        tl_tensor *y = NULL, *log_a = NULL, *partial = NULL;
        status = tl_node_saved_attached(node, 2, &y);
        if (status == TL_OK) status = tl_ag_log(a, &log_a);
        if (status == TL_OK) status = tl_graph_product3(g[0], y, log_a, &partial);
        if (status == TL_OK) status = to_input(node, 1, partial, &gi[1]);
        tl_release(y), tl_release(log_a);
    }
    tl_release(a), tl_release(b);
    return status;
}

/* One-input ops: slot 0 holds x (INPUT) or y (RESULT), as their first-order gradients save. */
typedef tl_status (*unary_graph_fn)(tl_node *node, tl_tensor *g, tl_tensor *saved, tl_tensor **gi);

static tl_status run_unary(tl_node *node, tl_tensor *const *g, tl_tensor **gi, unary_graph_fn fn) {
    tl_tensor *saved;
    TL_TRY(tl_node_saved_attached(node, 0, &saved));
    tl_status status = fn(node, g[0], saved, &gi[0]);
    tl_release(saved);
    return status;
}

#define UNARY_GRAPH(name)                                                                          \
    static tl_status name##_math(tl_node *node, tl_tensor *g, tl_tensor *s, tl_tensor **gi);       \
    static tl_status name##_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {            \
        return run_unary(node, g, gi, name##_math);                                                \
    }                                                                                              \
    static tl_status name##_math(tl_node *node, tl_tensor *g, tl_tensor *s, tl_tensor **gi)

/* exp' = y */
UNARY_GRAPH(exp) {
    (void)node;
    return tl_ag_mul(g, s, gi);
}

/* log' = 1 / x */
UNARY_GRAPH(log) {
    (void)node;
    return tl_ag_div(g, s, gi);
}

/* sqrt' = 1 / (2 y) */
UNARY_GRAPH(sqrt) {
    (void)node;
    tl_tensor *half_g;
    TL_TRY(scaled(g, 0.5, &half_g));
    tl_status status = tl_ag_div(half_g, s, gi);
    tl_release(half_g);
    return status;
}

/* tanh' = 1 - y^2: g - g y y */
UNARY_GRAPH(tanh) {
    (void)node;
    tl_tensor *gyy;
    TL_TRY(tl_graph_product3(g, s, s, &gyy));
    tl_status status = tl_ag_sub(g, gyy, gi);
    tl_release(gyy);
    return status;
}

/* sigmoid' = y (1 - y): g y - g y y */
UNARY_GRAPH(sigmoid) {
    (void)node;
    tl_tensor *gy = NULL, *gyy = NULL;
    tl_status status = tl_ag_mul(g, s, &gy);
    if (status == TL_OK) status = tl_ag_mul(gy, s, &gyy);
    if (status == TL_OK) status = tl_ag_sub(gy, gyy, gi);
    tl_release(gy), tl_release(gyy);
    return status;
}

/* relu' = [y > 0], a constant mask (its own derivative is 0 almost everywhere) */
UNARY_GRAPH(relu) {
    (void)node;
    tl_tensor *zero = NULL, *mask = NULL;
    tl_status status = tl_graph_number_like(s, 0.0, &zero);
    if (status == TL_OK) status = tl_gt(s, zero, &mask);
    if (status == TL_OK) status = tl_ag_where(mask, g, zero, gi);
    tl_release(zero), tl_release(mask);
    return status;
}

/* (x^p)' = p x^(p-1); the exponent is scalar[0] */
UNARY_GRAPH(pow_scalar) {
    const double p = node->scalar[0];
    tl_tensor *power = NULL, *term = NULL;
    tl_status status = tl_ag_pow_scalar(s, p - 1.0, &power);
    if (status == TL_OK) status = scaled(power, p, &term);
    if (status == TL_OK) status = tl_ag_mul(g, term, gi);
    tl_release(power), tl_release(term);
    return status;
}

/* erf' = 2 / sqrt(pi) exp(-x^2) */
UNARY_GRAPH(erf) {
    (void)node;
    tl_tensor *square = NULL, *minus = NULL, *e = NULL, *term = NULL;
    tl_status status = tl_ag_mul(s, s, &square);
    if (status == TL_OK) status = tl_ag_neg(square, &minus);
    if (status == TL_OK) status = tl_ag_exp(minus, &e);
    if (status == TL_OK) status = scaled(e, 2.0 / sqrt(pi), &term);
    if (status == TL_OK) status = tl_ag_mul(g, term, gi);
    tl_release(square), tl_release(minus), tl_release(e), tl_release(term);
    return status;
}

/* silu(x) = x s, s = sigmoid(x): silu' = s + x s (1 - s) = s (1 + x - x s) */
UNARY_GRAPH(silu) {
    (void)node;
    tl_tensor *sig = NULL, *xs = NULL, *inner = NULL, *one = NULL, *term = NULL, *d = NULL;
    tl_status status = tl_ag_sigmoid(s, &sig);
    if (status == TL_OK) status = tl_ag_mul(s, sig, &xs);
    if (status == TL_OK) status = tl_ag_sub(s, xs, &inner);
    if (status == TL_OK) status = tl_graph_number_like(s, 1.0, &one);
    if (status == TL_OK) status = tl_ag_add(inner, one, &term);
    if (status == TL_OK) status = tl_ag_mul(sig, term, &d);
    if (status == TL_OK) status = tl_ag_mul(g, d, gi);
    tl_release(sig), tl_release(xs), tl_release(inner), tl_release(one), tl_release(term);
    tl_release(d);
    return status;
}

/* gelu(x) = x Phi(x): gelu' = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
   phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
UNARY_GRAPH(gelu) {
    (void)node;
    tl_tensor *u = NULL, *e = NULL, *one = NULL, *cdf2 = NULL, *cdf = NULL, *square = NULL;
    tl_tensor *expo = NULL, *density = NULL, *xd = NULL, *d = NULL;
    tl_status status = scaled(s, 1.0 / sqrt(2.0), &u);
    if (status == TL_OK) status = tl_ag_erf(u, &e);
    if (status == TL_OK) status = tl_graph_number_like(s, 1.0, &one);
    if (status == TL_OK) status = tl_ag_add(e, one, &cdf2);
    if (status == TL_OK) status = scaled(cdf2, 0.5, &cdf);
    if (status == TL_OK) status = tl_ag_mul(s, s, &square);
    if (status == TL_OK) status = scaled(square, -0.5, &expo);
    if (status == TL_OK) status = tl_ag_exp(expo, &density);
    if (status == TL_OK) status = tl_ag_mul(s, density, &xd);
    tl_tensor *xd_scaled = NULL;
    if (status == TL_OK) status = scaled(xd, 1.0 / sqrt(2.0 * pi), &xd_scaled);
    if (status == TL_OK) status = tl_ag_add(cdf, xd_scaled, &d);
    if (status == TL_OK) status = tl_ag_mul(g, d, gi);
    tl_release(u), tl_release(e), tl_release(one), tl_release(cdf2), tl_release(cdf);
    tl_release(square), tl_release(expo), tl_release(density), tl_release(xd);
    tl_release(xd_scaled), tl_release(d);
    return status;
}

/* ---- reductions ------------------------------------------------------------------------- */
/* g back over the input's shape: size 1 at the reduced dims, then expanded; recorded */
static tl_status unreduce(tl_node *node, tl_tensor *g, tl_tensor **out) {
    int64_t kept[TL_MAX_DIMS];
    const int ndim = node->input_ndim[0];
    for (int d = 0; d < ndim; d++) kept[d] = node->ints[d] ? 1 : node->input_shape[0][d];
    tl_tensor *shaped;
    TL_TRY(tl_ag_reshape(g, kept, ndim, &shaped));
    tl_status status = tl_ag_expand(shaped, node->input_shape[0], ndim, out);
    tl_release(shaped);
    return status;
}

static tl_status sum_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return unreduce(node, g[0], &gi[0]);
}

static tl_status mean_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int64_t count = 1;
    for (int d = 0; d < node->input_ndim[0]; d++)
        if (node->ints[d]) count *= node->input_shape[0][d];
    tl_tensor *part;
    TL_TRY(scaled(g[0], 1.0 / (double)count, &part));
    tl_status status = unreduce(node, part, &gi[0]);
    tl_release(part);
    return status;
}

/* softmax: dx = y (g - sum(g y, dim)); slot 0: y */
static tl_status softmax_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *y, *gy = NULL, *total = NULL, *centred = NULL;
    TL_TRY(tl_node_saved_attached(node, 0, &y));
    int dim = node->dim;
    tl_status status = tl_ag_mul(g[0], y, &gy);
    if (status == TL_OK) status = tl_ag_sum_dims(gy, &dim, 1, true, 0, &total);
    if (status == TL_OK) status = tl_ag_sub(g[0], total, &centred);
    if (status == TL_OK) status = tl_ag_mul(y, centred, &gi[0]);
    tl_release(y), tl_release(gy), tl_release(total), tl_release(centred);
    return status;
}

/* log_softmax: dx = g - exp(y) sum(g, dim); slot 0: y */
static tl_status log_softmax_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *y, *p = NULL, *total = NULL, *share = NULL;
    TL_TRY(tl_node_saved_attached(node, 0, &y));
    int dim = node->dim;
    tl_status status = tl_ag_exp(y, &p);
    if (status == TL_OK) status = tl_ag_sum_dims(g[0], &dim, 1, true, 0, &total);
    if (status == TL_OK) status = tl_ag_mul(p, total, &share);
    if (status == TL_OK) status = tl_ag_sub(g[0], share, &gi[0]);
    tl_release(y), tl_release(p), tl_release(total), tl_release(share);
    return status;
}

/* ---- products --------------------------------------------------------------------------- */
/* linear: y = x W^T + b. dx = g W, dW = g^T x over the rows, db = g summed over the rows.
   slot 0: x (when W's gradient is needed), slot 1: W (when x's is). */
static tl_status linear_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(tl_ag_cast(g[0], node->input_dtype[0], &grad));
    const int64_t out_features = grad->shape[grad->ndim - 1];
    tl_status status = TL_OK;
    if (node->needs_input_grad[0]) {
        tl_tensor *w;
        status = tl_node_saved_attached(node, 1, &w);
        if (status == TL_OK) status = tl_ag_matmul(grad, w, &gi[0]);
        tl_release(w);
    }
    if (status == TL_OK && node->needs_input_grad[1]) {
        tl_tensor *x = NULL, *g2 = NULL, *x2 = NULL, *gt = NULL;
        status = tl_node_saved_attached(node, 0, &x);
        const int64_t in_features = x ? x->shape[x->ndim - 1] : 0;
        int64_t g_rows[2] = {-1, out_features}, x_rows[2] = {-1, in_features};
        if (status == TL_OK) status = tl_ag_reshape(grad, g_rows, 2, &g2);
        if (status == TL_OK) status = tl_ag_reshape(x, x_rows, 2, &x2);
        if (status == TL_OK) status = tl_ag_transpose(g2, 0, 1, &gt);
        if (status == TL_OK) status = tl_ag_matmul(gt, x2, &gi[1]);
        tl_release(x), tl_release(g2), tl_release(x2), tl_release(gt);
    }
    if (status == TL_OK && node->needs_input_grad[2]) {
        int dims[TL_MAX_DIMS];
        for (int d = 0; d < grad->ndim - 1; d++) dims[d] = d;
        status = grad->ndim > 1 ? tl_ag_sum_dims(grad, dims, grad->ndim - 1, false, 0, &gi[2])
                                : (gi[2] = tl_retain(grad), TL_OK);
    }
    tl_release(grad);
    return status;
}

/* matmul of operands of 2 dims or more (batch dims broadcast): da = g b^T, db = a^T g, each
   summed back over the batch dims broadcasting added; slot 0: a, slot 1: b */
static tl_status matmul_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->input_ndim[0] < 2 || node->input_ndim[1] < 2)
        return tl_error(TL_ERR_AUTOGRAD,
                        "create_graph: the differentiable gradient of matmul needs operands of 2 "
                        "dims or more (a vector operand is not supported yet)");
    tl_status status = TL_OK;
    for (int i = 0; i < 2 && status == TL_OK; i++) {
        if (!node->needs_input_grad[i]) continue;
        tl_tensor *other = NULL, *other_t = NULL, *partial = NULL;
        status = tl_node_saved_attached(node, 1 - i, &other);
        if (status == TL_OK) status = tl_ag_transpose(other, -2, -1, &other_t);
        if (status == TL_OK)
            status = i == 0 ? tl_ag_matmul(g[0], other_t, &partial)
                            : tl_ag_matmul(other_t, g[0], &partial);
        if (status == TL_OK) status = to_input(node, i, partial, &gi[i]);
        tl_release(other), tl_release(other_t);
    }
    return status;
}

/* ---- views and casts -------------------------------------------------------------------- */
static tl_status reshape_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_ag_reshape(g[0], node->input_shape[0], node->input_ndim[0], &gi[0]);
}

static tl_status transpose_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_ag_transpose(g[0], (int)node->ints[0], (int)node->ints[1], &gi[0]);
}

static tl_status permute_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int inverse[TL_MAX_DIMS];
    for (int i = 0; i < node->input_ndim[0]; i++) inverse[node->ints[i]] = i;
    return tl_ag_permute(g[0], inverse, node->input_ndim[0], &gi[0]);
}

static tl_status expand_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return to_input(node, 0, tl_retain(g[0]), &gi[0]);
}

static tl_status identity_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node;
    gi[0] = tl_retain(g[0]);
    return TL_OK;
}

static tl_status cast_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_ag_cast(g[0], node->input_dtype[0], &gi[0]);
}

/* ---- the table -------------------------------------------------------------------------- */
static const tl_graph_formula_row formulas[] = {
    {"neg", 0, neg_graph},           {"add", 0, add_graph},
    {"sub", 0, sub_graph},           {"mul", 0, mul_graph},
    {"div", 0, div_graph},           {"exp", 0, exp_graph},
    {"log", 0, log_graph},           {"sqrt", 0, sqrt_graph},
    {"tanh", 0, tanh_graph},         {"sigmoid", 0, sigmoid_graph},
    {"relu", 0, relu_graph},         {"pow", 2, pow_graph},
    {"pow", 1, pow_scalar_graph},    {"erf", 0, erf_graph},
    {"silu", 0, silu_graph},         {"gelu", 0, gelu_graph},
    {"sum", 0, sum_graph},           {"mean", 0, mean_graph},
    {"softmax", 0, softmax_graph},   {"log_softmax", 0, log_softmax_graph},
    {"linear", 0, linear_graph},     {"matmul", 0, matmul_graph},
    {"view", 0, reshape_graph},      {"reshape", 0, reshape_graph},
    {"flatten", 0, reshape_graph},   {"squeeze", 0, reshape_graph},
    {"unsqueeze", 0, reshape_graph}, {"transpose", 0, transpose_graph},
    {"permute", 0, permute_graph},   {"movedim", 0, permute_graph},
    {"expand", 0, expand_graph},     {"contiguous", 0, identity_graph},
    {"clone", 0, identity_graph},    {"cast", 0, cast_graph},
};

/* the tables tl_graph_formula looks through, in order */
typedef struct formula_table {
    const tl_graph_formula_row *rows;
    int count;
} formula_table;

static formula_table table_at(int t) {
    if (t == 0) return (formula_table){formulas, (int)(sizeof formulas / sizeof formulas[0])};
    return (formula_table){tl_nn_graph_formulas, tl_nn_graph_formula_count};
}
enum { TABLE_COUNT = 2 };

tl_backward_fn tl_graph_formula(const tl_node *node) {
    for (int t = 0; t < TABLE_COUNT; t++) {
        const formula_table table = table_at(t);
        for (int i = 0; i < table.count; i++)
            if (strcmp(table.rows[i].name, node->name) == 0 &&
                (!table.rows[i].inputs || table.rows[i].inputs == node->num_inputs))
                return table.rows[i].fn;
    }
    return NULL;
}

const char *tl_graph_formula_names(void) {
    static char names[2048];
    if (names[0]) return names;
    size_t at = 0;
    const char *previous = NULL;
    for (int t = 0; t < TABLE_COUNT; t++) {
        const formula_table table = table_at(t);
        for (int i = 0; i < table.count && at < sizeof names; i++) {
            const char *name = table.rows[i].name;
            if (previous && strcmp(name, previous) == 0) continue;
            at += (size_t)snprintf(names + at, sizeof names - at, previous ? ", %s" : "%s", name);
            previous = name;
        }
    }
    return names;
}
