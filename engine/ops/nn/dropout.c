/* dropout as ops: one kernel draws the mask from the global Philox stream and applies it. */
#include "ops/checks.h"
#include "ops/nn/nn_common.h"
#include "core/generator.h"

static tl_status check_args(const char *op, const char *name, const tl_tensor *x, double p) {
    TL_TRY(tl_check_tensor_arg(op, name, x));
    TL_TRY(nn_check_floating(op, name, x));
    if (!(p >= 0.0 && p <= 1.0))
        return tl_error(TL_ERR_ARGUMENT, "%s: p must be a probability in [0, 1], got %g", op, p);
    return TL_OK;
}

/* result (x's shape and dtype; x itself in place) = x * keep / (1 - p) under (seed, counter). */
static tl_status run(const tl_tensor *x, double p, uint64_t seed, uint64_t counter,
                     tl_tensor *result) {
    if (tl_numel(x) == 0) return TL_OK;
    tl_op_args args = {
        .scalar = {p, 0.0}, .has_scalar = {true, false}, .seed = seed, .counter = counter};
    const tl_kernel_entry *k =
        tl_dispatch(TL_OP_dropout, tl_tensor_device(x), x->dtype, NN_TENSORS(result, x));
    return k ? k->fn.unary(result, x, &args) : tl_dispatch_status();
}

/* The stream of a mask over x: ceil(n / 4) blocks of the global generator (one float32
   uniform per word, as tl_rand), none when nothing is drawn (p = 1, no elements). */
static void draw(const tl_tensor *x, double p, uint64_t *seed, uint64_t *counter) {
    int64_t n = tl_numel(x);
    *seed = *counter = 0;
    if (n > 0 && p < 1.0)
        tl_random_reserve(tl_tensor_device(x), (uint64_t)(n + 3) / 4, seed, counter);
}

static void report(uint64_t seed, uint64_t counter, uint64_t *seed_out, uint64_t *counter_out) {
    if (seed_out) *seed_out = seed;
    if (counter_out) *counter_out = counter;
}

/* out = dropout of x under (seed, counter), a new tensor; p = 0: x itself. */
static tl_status apply(const tl_tensor *x, double p, uint64_t seed, uint64_t counter,
                       tl_tensor **out) {
    if (p == 0.0) {
        *out = tl_retain((tl_tensor *)x);
        return TL_OK;
    }
    tl_tensor *result;
    TL_TRY(tl_empty(x->shape, x->ndim, x->dtype, tl_tensor_device(x), &result));
    tl_status status = run(x, p, seed, counter, result);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_dropout(const tl_tensor *x, double p, tl_tensor **out, uint64_t *seed,
                     uint64_t *counter) {
    TL_TRY(check_args("dropout", "x", x, p));
    uint64_t s = 0, c = 0;
    if (p > 0.0) draw(x, p, &s, &c);
    TL_TRY(apply(x, p, s, c, out));
    report(s, c, seed, counter);
    return TL_OK;
}

tl_status tl_dropout_backward(const tl_tensor *grad, double p, uint64_t seed, uint64_t counter,
                              tl_tensor **grad_input) {
    TL_TRY(check_args("dropout_backward", "grad", grad, p));
    return apply(grad, p, seed, counter, grad_input);
}

tl_status tl_dropout_(tl_tensor *x, double p, uint64_t *seed, uint64_t *counter) {
    TL_TRY(check_args("dropout_", "x", x, p));
    TL_TRY(tl_check_writable("dropout_", "x", x));
    uint64_t s = 0, c = 0;
    if (p > 0.0) {
        draw(x, p, &s, &c);
        TL_TRY(run(x, p, s, c, x));
        tl_bump_version(x);
    }
    report(s, c, seed, counter);
    return TL_OK;
}
