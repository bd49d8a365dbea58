/* The global random generator (a seed and a Philox block counter) and the random ops:
   rand, randn, randint, randperm. Each call reserves the counter blocks its kernel reads,
   so one seed gives one sequence and consecutive calls differ. */
#include <pthread.h>

#include "ops/random.h"
#include "kernels/kernel.h"
#include "tlua/ops.h"
#include "tlua/runtime.h"

#define DEFAULT_SEED 67280421310721ull

static pthread_mutex_t generator_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t generator_seed = DEFAULT_SEED;
static uint64_t generator_counter; /* the next unused Philox block */

void tl_manual_seed(uint64_t seed) {
    pthread_mutex_lock(&generator_lock);
    generator_seed = seed;
    generator_counter = 0;
    pthread_mutex_unlock(&generator_lock);
}

void tl_get_rng_state(tl_rng_state *out) {
    pthread_mutex_lock(&generator_lock);
    *out = (tl_rng_state){.seed = generator_seed, .counter = generator_counter};
    pthread_mutex_unlock(&generator_lock);
}

void tl_set_rng_state(tl_rng_state state) {
    pthread_mutex_lock(&generator_lock);
    generator_seed = state.seed;
    generator_counter = state.counter;
    pthread_mutex_unlock(&generator_lock);
}

void tl_random_reserve(uint64_t blocks, uint64_t *seed, uint64_t *counter) {
    pthread_mutex_lock(&generator_lock);
    *seed = generator_seed;
    *counter = generator_counter;
    generator_counter += blocks;
    pthread_mutex_unlock(&generator_lock);
}

/* Philox blocks (4 words each) a kernel reads for n elements: see kernels/cpu/random.c. */
static uint64_t blocks_for(tl_op op, tl_dtype dtype, int64_t n) {
    int per = op == TL_OP_randint || dtype == TL_F64 ? 2 : 4;
    return (uint64_t)((n + per - 1) / per);
}

static tl_status random_op(tl_op op, const int64_t *shape, int ndim, tl_dtype dtype,
                           tl_device device, tl_op_args args, tl_tensor **out) {
    TL_TRY(tl_device_check(device));
    tl_tensor *t;
    TL_TRY(tl_empty(shape, ndim, dtype, device, &t));
    const tl_tensor *traced[] = {t, NULL};
    const tl_kernel_entry *kernel = tl_dispatch(op, device, dtype, traced);
    if (!kernel) {
        tl_release(t);
        return tl_dispatch_status();
    }
    int64_t n = tl_numel(t);
    tl_status status = TL_OK;
    if (n > 0) {
        tl_random_reserve(blocks_for(op, dtype, n), &args.seed, &args.counter);
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
