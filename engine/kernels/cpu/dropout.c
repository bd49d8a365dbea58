/* CPU dropout kernel: out = in * keep / (1 - p), keep drawn per element from the Philox stream. */
#include <string.h>

#include "kernels/cpu/nn_kernels.h"
#include "kernels/philox.h"

/* Element e (out's row-major index) is kept when the float32 uniform that `rand` draws for it
   from (args->seed, args->counter) (kernels/philox.h: block counter + e / 4, word e % 4) is
   >= (float)p, p = args->scalar[0]; a kept element becomes x / (1 - p), a dropped one x * 0
   (NaN stays NaN, as x * mask / (1 - p) gives); p >= 1 drops all without drawing. Any strides:
   out may be in itself (each element is read before it is written), in may be expanded. */

/* Elements one thread handles at a time: a multiple of 4 (one Philox block per 4 elements). */
enum { CHUNK = 512 };

typedef struct dropout_plan {
    int ndim; /* dims of size > 1, merged where both tensors allow: row-major order is kept */
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[2][TL_MAX_DIMS]; /* out, in (elements) */
    int64_t numel;
    bool dense; /* out and in contiguous: element e at offset e in both */
    void *out;
    const void *in;
    uint64_t seed, counter;
    float threshold;  /* p as float32, as `rand(shape) >= p` compares */
    double keep_div;  /* 1 - p */
    bool all_dropped; /* p >= 1 */
} dropout_plan;

/* A chunk of consecutive elements from begin: whether each is kept and, unless the plan is
   dense, their offsets in out and in. */
typedef struct dropout_chunk {
    int n;
    int64_t begin;
    int64_t out_off[CHUNK], in_off[CHUNK];
    bool keep[CHUNK];
} dropout_chunk;

static void plan_make(dropout_plan *pl, tl_tensor *out, const tl_tensor *in,
                      const tl_op_args *args) {
    double p = args->scalar[0];
    pl->numel = tl_numel(out);
    pl->out = tl_data(out);
    pl->in = tl_data(in);
    pl->seed = args->seed;
    pl->counter = args->counter;
    pl->threshold = (float)p;
    pl->keep_div = 1.0 - p;
    pl->all_dropped = p >= 1.0;
    pl->ndim = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        int k = pl->ndim;
        if (k > 0 && pl->strides[0][k - 1] == out->strides[d] * size &&
            pl->strides[1][k - 1] == in->strides[d] * size) {
            pl->shape[k - 1] *= size;
        } else {
            pl->shape[k] = size;
            pl->ndim++;
        }
        pl->strides[0][pl->ndim - 1] = out->strides[d];
        pl->strides[1][pl->ndim - 1] = in->strides[d];
    }
    pl->dense =
        pl->ndim == 0 || (pl->ndim == 1 && pl->strides[0][0] == 1 && pl->strides[1][0] == 1);
}

/* The offsets of elements begin .. begin + c->n - 1 in out and in. */
static void chunk_offsets(const dropout_plan *pl, int64_t begin, dropout_chunk *c) {
    int k = pl->ndim;
    int64_t idx[TL_MAX_DIMS], rest = begin, oo = 0, io = 0;
    for (int d = k - 1; d >= 0; d--) {
        idx[d] = rest % pl->shape[d];
        rest /= pl->shape[d];
        oo += idx[d] * pl->strides[0][d];
        io += idx[d] * pl->strides[1][d];
    }
    for (int i = 0; i < c->n; i++) {
        c->out_off[i] = oo;
        c->in_off[i] = io;
        for (int d = k - 1; d >= 0; d--) { /* the next element: one step with carry */
            oo += pl->strides[0][d];
            io += pl->strides[1][d];
            if (++idx[d] < pl->shape[d]) break;
            oo -= pl->shape[d] * pl->strides[0][d];
            io -= pl->shape[d] * pl->strides[1][d];
            idx[d] = 0;
        }
    }
}

/* keep[i] for elements begin + i (begin a multiple of 4): one Philox block per 4 elements. */
static void chunk_mask(const dropout_plan *pl, int64_t begin, dropout_chunk *c) {
    if (pl->all_dropped) {
        memset(c->keep, 0, sizeof c->keep[0] * (size_t)c->n);
        return;
    }
    for (int i = 0; i < c->n; i += 4) {
        tl_philox_block b = tl_philox(pl->counter + (uint64_t)(begin + i) / 4, pl->seed);
        for (int j = 0; j < 4 && i + j < c->n; j++)
            c->keep[i + j] = (float)(b.w[j] >> 8) * 0x1p-24f >= pl->threshold;
    }
}

typedef void (*apply_fn)(const dropout_plan *pl, const dropout_chunk *c);

enum { DROPOUT_DENSE, DROPOUT_STRIDED, DROPOUT_ALL };
static const tl_kernel_variant dropout_variants[] = {
    [DROPOUT_DENSE] = TL_VARIANT(dropout, TL_DTYPES_FLOATING, "dense",
                                 "out and in contiguous (after size-1 dims): flat loops"),
    [DROPOUT_STRIDED] = TL_VARIANT(dropout, TL_DTYPES_FLOATING, "strided",
                                   "any other strides: each chunk's offsets computed first"),
    [DROPOUT_ALL] = TL_VARIANT(dropout, TL_DTYPES_FLOATING, "all_dropped",
                               "p >= 1: every element dropped, no draw"),
};

static void run(const dropout_plan *pl, apply_fn apply) {
    int64_t chunks = (pl->numel + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (pl->numel > NN_PARALLEL_THRESHOLD)
    for (int64_t ch = 0; ch < chunks; ch++) {
        dropout_chunk c;
        int64_t begin = ch * CHUNK, left = pl->numel - begin;
        c.n = left < CHUNK ? (int)left : CHUNK;
        c.begin = begin;
        if (!pl->dense) chunk_offsets(pl, begin, &c);
        chunk_mask(pl, begin, &c);
        apply(pl, &c);
    }
}

/* Per dtype: kept x -> x / (1 - p) in the compute type C, dropped x -> x * 0. */
#define DROPOUT_KERNEL(suffix, T, C, LOAD, STORE)                                                  \
    static void apply_##suffix(const dropout_plan *pl, const dropout_chunk *c) {                   \
        T *out = pl->out;                                                                          \
        const T *in = pl->in;                                                                      \
        const C q = (C)pl->keep_div;                                                               \
        if (pl->dense) {                                                                           \
            T *o = out + c->begin;                                                                 \
            const T *x = in + c->begin;                                                            \
            for (int i = 0; i < c->n; i++)                                                         \
                o[i] = STORE(c->keep[i] ? LOAD(x[i]) / q : LOAD(x[i]) * (C)0);                     \
            return;                                                                                \
        }                                                                                          \
        for (int i = 0; i < c->n; i++) {                                                           \
            C x = LOAD(in[c->in_off[i]]);                                                          \
            out[c->out_off[i]] = STORE(c->keep[i] ? x / q : x * (C)0);                             \
        }                                                                                          \
    }                                                                                              \
    static tl_status cpu_dropout_##suffix(tl_tensor *out, const tl_tensor *in,                     \
                                          const tl_op_args *args) {                                \
        dropout_plan pl;                                                                           \
        plan_make(&pl, out, in, args);                                                             \
        if (pl.numel == 0) return TL_OK;                                                           \
        tl_variant_ran(&dropout_variants[pl.all_dropped ? DROPOUT_ALL                              \
                                         : pl.dense     ? DROPOUT_DENSE                            \
                                                        : DROPOUT_STRIDED],                            \
                       out->dtype);                                                                \
        run(&pl, apply_##suffix);                                                                  \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DROPOUT_KERNEL)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(dropout, unary, cpu_dropout),
};

TL_KERNEL_TABLE(tl_cpu_dropout_table, TL_DEVICE_CPU, entries);
TL_VARIANT_TABLE(tl_cpu_dropout_variants, TL_DEVICE_CPU, dropout_variants);
