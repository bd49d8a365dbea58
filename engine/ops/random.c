/* The random ops: rand, randn, randint, randperm. Each call reserves the counter blocks its kernel
   reads from the global generator (core/generator.c), so one seed gives one sequence and
   consecutive calls differ. */
#include <math.h>

#include "core/generator.h"
#include "kernels/kernel.h"
#include "tlua/nn.h"
#include "tlua/ops.h"
#include "tlua/runtime.h"

/* Philox blocks (4 words each) a kernel reads for n elements: see kernels/cpu/random.c. */
static uint64_t blocks_for(tl_op op, tl_dtype dtype, int64_t n) {
    int per = op == TL_OP_randint || dtype == TL_F64 ? 2 : 4;
    return (uint64_t)((n + per - 1) / per);
}

static tl_status random_op(tl_op op, const int64_t *shape, int ndim, tl_dtype dtype,
                           tl_device device, tl_op_args args, tl_tensor **out) {
    TL_TRY(tl_error_as(tl_device_check(device), tl_op_info_of(op)->name));
    tl_tensor *t;
    TL_TRY(tl_error_as(tl_empty(shape, ndim, dtype, device, &t), tl_op_info_of(op)->name));
    const tl_tensor *traced[] = {t, NULL};
    const tl_kernel_entry *kernel = tl_dispatch(op, device, dtype, traced);
    if (!kernel) {
        tl_release(t);
        return tl_dispatch_status();
    }
    int64_t n = tl_numel(t);
    tl_status status = TL_OK;
    if (n > 0) {
        tl_random_reserve(device, blocks_for(op, dtype, n), &args.seed, &args.counter);
        status = kernel->fn.random(t, &args);
    }
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}

static tl_status need_floating(const char *op, tl_dtype dtype) {
    if (!tl_dtype_is_floating(dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", op,
                        tl_dtype_name(dtype));
    return TL_OK;
}

tl_status tl_rand(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                  tl_tensor **out) {
    TL_TRY(need_floating("rand", dtype));
    return random_op(TL_OP_rand, shape, ndim, dtype, device, (tl_op_args){0}, out);
}

tl_status tl_randn(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out) {
    TL_TRY(need_floating("randn", dtype));
    return random_op(TL_OP_randn, shape, ndim, dtype, device, (tl_op_args){0}, out);
}

/* The largest integer magnitude up to which every integer is exact in dtype. */
static int64_t exact_limit(tl_dtype dtype) {
    switch (dtype) {
    case TL_F32:
        return (int64_t)1 << 24;
    case TL_F64:
        return (int64_t)1 << 53;
    case TL_BF16:
        return (int64_t)1 << 8;
    case TL_F16:
        return (int64_t)1 << 11;
    case TL_I32:
        return INT32_MAX;
    default:
        return (int64_t)1 << 53; /* int64: low and high travel as doubles */
    }
}

tl_status tl_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, tl_dtype dtype,
                     tl_device device, tl_tensor **out) {
    if (dtype == TL_BOOL)
        return tl_error(TL_ERR_DTYPE, "randint: expected an integer or floating dtype, got bool");
    if (high <= low)
        return tl_error(TL_ERR_ARGUMENT, "randint: expected low < high, got low %lld, high %lld",
                        (long long)low, (long long)high);
    int64_t limit = exact_limit(dtype);
    int64_t min = dtype == TL_I32 ? INT32_MIN : -limit;
    if (low < min || high - 1 > limit)
        return tl_error(TL_ERR_ARGUMENT,
                        "randint: range [%lld, %lld) does not fit %s (expected values from %lld "
                        "to %lld)",
                        (long long)low, (long long)high, tl_dtype_name(dtype), (long long)min,
                        (long long)limit);
    tl_op_args args = {.scalar = {(double)low, (double)high}, .has_scalar = {true, true}};
    return random_op(TL_OP_randint, shape, ndim, dtype, device, args, out);
}

tl_status tl_randperm(int64_t n, tl_dtype dtype, tl_device device, tl_tensor **out) {
    if (n < 0)
        return tl_error(TL_ERR_ARGUMENT, "randperm: expected n >= 0, got %lld", (long long)n);
    if (dtype == TL_BOOL)
        return tl_error(TL_ERR_DTYPE, "randperm: expected an integer or floating dtype, got bool");
    if (n > 0 && n - 1 > exact_limit(dtype))
        return tl_error(TL_ERR_ARGUMENT, "randperm: n = %lld does not fit %s", (long long)n,
                        tl_dtype_name(dtype));
    TL_TRY(tl_device_check(device));
    /* Fisher-Yates on the host, with swap positions drawn from the global generator
       (53-bit draws: the modulo bias is below 2^-30 for n < 2^23). */
    tl_tensor *perm, *draws = NULL;
    TL_TRY(tl_empty(&n, 1, TL_I64, TL_CPU, &perm));
    tl_status status = TL_OK;
    if (n > 1) {
        int64_t count = n - 1;
        status = tl_randint(0, (int64_t)1 << 53, &count, 1, TL_I64, TL_CPU, &draws);
    }
    if (status == TL_OK) {
        int64_t *p = tl_data(perm);
        const int64_t *r = draws ? tl_data(draws) : NULL;
        for (int64_t i = 0; i < n; i++) p[i] = i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = r[n - 1 - i] % (i + 1), tmp = p[i];
            p[i] = p[j];
            p[j] = tmp;
        }
    }
    tl_release(draws);
    if (status == TL_OK && (dtype != TL_I64 || device.type != TL_DEVICE_CPU)) {
        tl_tensor *converted;
        status = tl_to(perm, dtype, device, &converted);
        if (status == TL_OK) tl_release(perm), perm = converted;
    }
    if (status != TL_OK) {
        tl_release(perm);
        return status;
    }
    *out = perm;
    return TL_OK;
}

/* ---- multinomial ---------------------------------------------------------------------------
   Each row of p [R, C] (float64) checked: code 1 for a distribution (finite probabilities >= 0,
   not all 0, and without replacement at least n of them non-zero), else 2, 3 or 4 (the note
   below). On the CPU the first bad row is an error at once; on CUDA the codes go through the
   queued index check (raised by the next synchronization, the row counted from 1). */
static const char multinomial_faults[] =
    "2: a negative, infinite or NaN probability; 3: every probability 0; 4: fewer non-zero "
    "probabilities than samples drawn without replacement";

static tl_status row_codes(const tl_tensor *p, int64_t n, bool replacement, tl_tensor **codes) {
    enum {
        ZERO,
        INF,
        NONNEG,
        FINITE,
        A,
        B,
        SUM,
        TWICE,
        BAD,
        NZ,
        NONE,
        FEW,
        N,
        C1,
        C2,
        C3,
        C4,
        C34,
        C234,
        COUNT
    };
    tl_tensor *t[COUNT] = {0};
    const int dim = 1;
    tl_status s = tl_scalar_tensor(tl_scalar_float(0), p, &t[ZERO]);
    if (s == TL_OK) s = tl_scalar_tensor(tl_scalar_float(INFINITY), p, &t[INF]);
    if (s == TL_OK) s = tl_ge(p, t[ZERO], &t[NONNEG]); /* false for NaN too */
    if (s == TL_OK) s = tl_lt(p, t[INF], &t[FINITE]);
    if (s == TL_OK) s = tl_count_nonzero_dims(t[NONNEG], &dim, 1, false, 0, &t[A]);
    if (s == TL_OK) s = tl_count_nonzero_dims(t[FINITE], &dim, 1, false, 0, &t[B]);
    if (s == TL_OK) s = tl_add(t[A], t[B], &t[SUM]);
    if (s == TL_OK) s = tl_scalar_tensor(tl_scalar_int(2 * p->shape[1]), t[SUM], &t[TWICE]);
    if (s == TL_OK) s = tl_lt(t[SUM], t[TWICE], &t[BAD]);
    if (s == TL_OK) s = tl_count_nonzero_dims(p, &dim, 1, false, 0, &t[NZ]);
    for (int c = 1; c <= 4 && s == TL_OK; c++)
        s = tl_scalar_tensor(tl_scalar_int(c), t[NZ], &t[C1 + c - 1]);
    if (s == TL_OK) s = tl_scalar_tensor(tl_scalar_int(0), t[NZ], &t[N]);
    if (s == TL_OK) s = tl_eq(t[NZ], t[N], &t[NONE]);
    if (s == TL_OK && !replacement) {
        tl_release(t[N]), t[N] = NULL;
        s = tl_scalar_tensor(tl_scalar_int(n), t[NZ], &t[N]);
        if (s == TL_OK) s = tl_lt(t[NZ], t[N], &t[FEW]);
        if (s == TL_OK) s = tl_where(t[FEW], t[C4], t[C1], &t[C34]);
    } else if (s == TL_OK) {
        t[C34] = tl_retain(t[C1]);
    }
    if (s == TL_OK) s = tl_where(t[NONE], t[C3], t[C34], &t[C234]);
    if (s == TL_OK) s = tl_where(t[BAD], t[C2], t[C234], codes);
    for (int i = 0; i < COUNT; i++) tl_release(t[i]);
    return s;
}

static tl_status check_rows(const tl_tensor *p, int64_t n, bool replacement) {
    const int64_t rows = p->shape[0];
    tl_tensor *codes;
    TL_TRY(row_codes(p, n, replacement, &codes));
    tl_status status = TL_OK;
    if (tl_tensor_device(p).type == TL_DEVICE_CPU) {
        const int64_t *code = tl_data(codes);
        for (int64_t r = 0; r < rows && status == TL_OK; r++) {
            if (code[r] == 2)
                status = tl_error(TL_ERR_ARGUMENT,
                                  "multinomial: row %lld of probs holds a negative, infinite or "
                                  "NaN probability",
                                  (long long)r + 1);
            else if (code[r] == 3)
                status = tl_error(TL_ERR_ARGUMENT,
                                  "multinomial: row %lld of probs has every probability 0 "
                                  "(expected a positive sum)",
                                  (long long)r + 1);
            else if (code[r] == 4)
                status = tl_error(TL_ERR_ARGUMENT,
                                  "multinomial: row %lld of probs has fewer non-zero "
                                  "probabilities than the %lld samples drawn without replacement",
                                  (long long)r + 1, (long long)n);
        }
    } else {
        const tl_index_range range = {.op = "multinomial",
                                      .what = "the check of each row of probs",
                                      .range_of = "a distribution",
                                      .note = multinomial_faults,
                                      .first = 1,
                                      .count = 1};
        status = tl_check_index_range(codes, &range);
    }
    tl_release(codes);
    return status;
}

/* With replacement: u uniform in [0, 1) (float64 draws of the global stream, [R, n]), a sample
   is the first category whose cumulative sum (float64) exceeds u times the row's total.
   Without replacement: each category gets the key -log(1 - u) / p (u one draw per category,
   [R, C]); the n smallest keys, in order, are a draw of n categories one after another, each in
   proportion to the probabilities of those not yet drawn (Efraimidis and Spirakis, 2006). */
tl_status tl_multinomial(const tl_tensor *probs, int64_t n, bool replacement, tl_tensor **out) {
    const char *op = "multinomial";
    if (!probs) return tl_error(TL_ERR_ARGUMENT, "%s: argument 'probs' is NULL", op);
    if (!tl_dtype_is_floating(probs->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: probs must be a floating tensor, got %s", op,
                        tl_dtype_name(probs->dtype));
    if (probs->ndim != 1 && probs->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "%s: probs must be a 1-d or 2-d tensor, got %d dims", op,
                        probs->ndim);
    const int64_t C = probs->shape[probs->ndim - 1], R = probs->ndim == 2 ? probs->shape[0] : 1;
    if (C == 0)
        return tl_error(TL_ERR_SHAPE, "%s: probs has no category (expected at least one)", op);
    if (n < 1) return tl_error(TL_ERR_ARGUMENT, "%s: n must be >= 1, got %lld", op, (long long)n);
    if (!replacement && n > C)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: cannot draw %lld samples without replacement from %lld categories", op,
                        (long long)n, (long long)C);
    const tl_device device = tl_tensor_device(probs);
    enum { P2, P, CDF, TOTAL, U, TARGET, POS, NEG, LOG, E, KEY, VALUES, SAMPLES, COUNT };
    tl_tensor *t[COUNT] = {0};
    tl_status s = tl_reshape((tl_tensor *)probs, (const int64_t[]){R, C}, 2, &t[P2]);
    if (s == TL_OK) s = tl_cast(t[P2], TL_F64, &t[P]);
    if (s == TL_OK && R > 0) s = check_rows(t[P], n, replacement);
    if (s == TL_OK && R == 0)
        s = tl_empty((const int64_t[]){0, n}, 2, TL_I64, device, &t[SAMPLES]);
    else if (s == TL_OK && replacement) {
        s = tl_cumsum(t[P], 1, &t[CDF]);
        if (s == TL_OK) s = tl_narrow(t[CDF], 1, C - 1, 1, &t[TOTAL]);
        if (s == TL_OK) s = tl_rand((const int64_t[]){R, n}, 2, TL_F64, device, &t[U]);
        if (s == TL_OK) s = tl_mul(t[U], t[TOTAL], &t[TARGET]);
        if (s == TL_OK) s = tl_searchsorted(t[CDF], t[TARGET], true, &t[POS]);
        /* u times the total rounds to the total itself once in 2^53 draws: the last category */
        if (s == TL_OK) s = tl_clamp(t[POS], false, 0, true, (double)(C - 1), &t[SAMPLES]);
    } else if (s == TL_OK) {
        s = tl_rand((const int64_t[]){R, C}, 2, TL_F64, device, &t[U]);
        if (s == TL_OK) s = tl_neg(t[U], &t[NEG]);
        if (s == TL_OK) s = tl_log1p(t[NEG], &t[LOG]);
        if (s == TL_OK) s = tl_neg(t[LOG], &t[E]);
        if (s == TL_OK) s = tl_div(t[E], t[P], &t[KEY]); /* p = 0: inf (or NaN), drawn last */
        if (s == TL_OK) s = tl_topk(t[KEY], n, 1, false, &t[VALUES], &t[SAMPLES]);
    }
    if (s == TL_OK && probs->ndim == 1)
        s = tl_reshape(t[SAMPLES], &n, 1, out);
    else if (s == TL_OK)
        *out = tl_retain(t[SAMPLES]);
    for (int i = 0; i < COUNT; i++) tl_release(t[i]);
    return s;
}
