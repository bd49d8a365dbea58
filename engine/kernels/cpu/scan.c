/* CPU kernels of cumsum (an inclusive prefix sum along one dim, any strides) and nonzero (the
   coordinates of the non-zero elements in row-major order, counted first, then written). */
#include <string.h>

#include "core/half.h"
#include "kernels/arith.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define PARALLEL_THRESHOLD 32768 /* elements before OpenMP is worth it */
#define NONZERO_CHUNK      16384 /* elements per chunk of a parallel nonzero */
#define NONZERO_MAX_CHUNKS 256

/* ---- cumsum ------------------------------------------------------------------------------
   Along the lines of loop.h's plan (tensors: in, out), up to TL_CPU_LANE_BLOCK lines scanned side
   by side. */
enum { IN, OUT };

#define LOAD_F32(x)   ((double)(x))
#define LOAD_F64(x)   (x)
#define LOAD_BF16(x)  tl_bf16_load(x)
#define LOAD_F16(x)   tl_f16_load(x)
#define LOAD_WRAP(x)  ((uint64_t)(int64_t)(x))
#define LOAD_BOOL(x)  ((uint64_t)((x) != 0)) /* any non-zero byte is true */
#define STORE_F32(a)  ((float)(a))
#define STORE_F64(a)  (a)
#define STORE_BF16(a) tl_bf16_round(a)
#define STORE_F16(a)  tl_f16_round(a)
#define STORE_I64(a)  tl_wrap_to_i64(a)

static tl_status run_cumsum(tl_cpu_lines_fn rows, tl_dtype out_dtype, tl_tensor *out,
                            const tl_tensor *in, int dim) {
    if (out->dtype != out_dtype)
        return tl_error(TL_ERR_DTYPE, "cumsum: kernel expected a %s output, got %s",
                        tl_dtype_name(out_dtype), tl_dtype_name(out->dtype));
    tl_cpu_lines lines;
    tl_cpu_lines_plan(&lines, 2, (const tl_tensor *[]){in, out}, dim);
    if (lines.items == 0 || lines.len == 0) return TL_OK;
    tl_cpu_lines_for_each(&lines, PARALLEL_THRESHOLD, rows, NULL);
    return TL_OK;
}

/* The cumsum kernel of one dtype: T in, O out (of dtype OUT_DTYPE), ACC the running sum (double
   for float32 and float64, float for bfloat16 and float16, uint64 for integers and bool), each
   output rounded once; scan_rows scans `lanes` lines side by side. */
#define DEFINE_CUMSUM(sfx, T, O, OUT_DTYPE, ACC, LOAD, STORE)                                      \
    static void scan_rows_##sfx(const tl_cpu_lines *p, char *const *at, int64_t lanes,             \
                                const void *ctx) {                                                 \
        (void)ctx;                                                                                 \
        const T *x = (const T *)at[IN];                                                            \
        O *y = (O *)at[OUT];                                                                       \
        const int64_t step_in = p->step[IN], step_out = p->step[OUT];                              \
        if (lanes == 1) {                                                                          \
            ACC acc = 0;                                                                           \
            for (int64_t r = 0; r < p->len; r++) {                                                 \
                acc += LOAD(x[r * step_in]);                                                       \
                y[r * step_out] = STORE(acc);                                                      \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        ACC acc[TL_CPU_LANE_BLOCK];                                                                \
        for (int64_t l = 0; l < lanes; l++) acc[l] = 0;                                            \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = x + r * step_in;                                                        \
            O *dst = y + r * step_out;                                                             \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                acc[l] += LOAD(row[l * p->lane[IN]]);                                              \
                dst[l * p->lane[OUT]] = STORE(acc[l]);                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status cumsum_##sfx(tl_tensor *out, const tl_tensor *in, int dim) {                  \
        return run_cumsum(scan_rows_##sfx, OUT_DTYPE, out, in, dim);                               \
    }
DEFINE_CUMSUM(f32, float, float, TL_F32, double, LOAD_F32, STORE_F32)
DEFINE_CUMSUM(f64, double, double, TL_F64, double, LOAD_F64, STORE_F64)
DEFINE_CUMSUM(bf16, uint16_t, uint16_t, TL_BF16, float, LOAD_BF16, STORE_BF16)
DEFINE_CUMSUM(f16, uint16_t, uint16_t, TL_F16, float, LOAD_F16, STORE_F16)
DEFINE_CUMSUM(i32, int32_t, int64_t, TL_I64, uint64_t, LOAD_WRAP, STORE_I64)
DEFINE_CUMSUM(i64, int64_t, int64_t, TL_I64, uint64_t, LOAD_WRAP, STORE_I64)
DEFINE_CUMSUM(b8, uint8_t, int64_t, TL_I64, uint64_t, LOAD_BOOL, STORE_I64)

/* ---- nonzero -----------------------------------------------------------------------------
   The elements are cut into chunks (one for small inputs); each chunk's count gives where its
   coordinates start, so chunks are written in parallel, each in row-major order. */
#define NZ_FLOAT(x) ((x) != 0)           /* NaN is non-zero, -0.0 is zero */
#define NZ_HALF(x)  (((x)&0x7fffu) != 0) /* bf16/f16 bits without the sign */
#define NZ_INT(x)   ((x) != 0)

/* The non-zero elements of x[begin, end): count their number; write their coordinates into
   rows (coord: the coordinates of element begin, walked along). */
typedef struct nonzero_ops {
    int64_t (*count)(const void *x, int64_t begin, int64_t end);
    void (*write)(const void *x, int64_t begin, int64_t end, const int64_t *shape, int ndim,
                  int64_t *coord, int64_t *rows);
} nonzero_ops;

#define DEFINE_NONZERO(sfx, T, NZ)                                                                 \
    static int64_t count_##sfx(const void *data, int64_t begin, int64_t end) {                     \
        const T *x = data;                                                                         \
        int64_t c = 0;                                                                             \
        for (int64_t j = begin; j < end; j++) c += NZ(x[j]) ? 1 : 0;                               \
        return c;                                                                                  \
    }                                                                                              \
    static void write_##sfx(const void *data, int64_t begin, int64_t end, const int64_t *shape,    \
                            int ndim, int64_t *coord, int64_t *rows) {                             \
        const T *x = data;                                                                         \
        for (int64_t j = begin; j < end; j++) {                                                    \
            if (NZ(x[j])) {                                                                        \
                memcpy(rows, coord, (size_t)ndim * sizeof *rows);                                  \
                rows += ndim;                                                                      \
            }                                                                                      \
            for (int d = ndim - 1; d >= 0 && ++coord[d] == shape[d]; d--) coord[d] = 0;            \
        }                                                                                          \
    }                                                                                              \
    static const nonzero_ops nonzero_ops_##sfx = {count_##sfx, write_##sfx};                       \
    static tl_status nonzero_##sfx(tl_tensor *out, const tl_tensor *in, int64_t *count) {          \
        return run_nonzero(&nonzero_ops_##sfx, out, in, count);                                    \
    }

static int64_t chunk_count(int64_t n) {
    if (n <= PARALLEL_THRESHOLD) return 1;
    int64_t chunks = (n + NONZERO_CHUNK - 1) / NONZERO_CHUNK;
    return chunks < NONZERO_MAX_CHUNKS ? chunks : NONZERO_MAX_CHUNKS;
}

static tl_status run_nonzero(const nonzero_ops *ops, tl_tensor *out, const tl_tensor *in,
                             int64_t *count) {
    const int64_t n = tl_numel(in), chunks = chunk_count(n);
    const void *x = n > 0 ? tl_data(in) : NULL; /* an empty tensor's offset may be any */
    const int64_t chunk = chunks > 1 ? (n + chunks - 1) / chunks : n;
    int64_t starts[NONZERO_MAX_CHUNKS + 1]; /* starts[c]: the coordinates before chunk c */
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t b = c * chunk, e = b + chunk < n ? b + chunk : n;
        starts[c + 1] = b < e ? ops->count(x, b, e) : 0;
    }
    starts[0] = 0;
    for (int64_t c = 0; c < chunks; c++) starts[c + 1] += starts[c];
    const int64_t total = starts[chunks];
    if (!out) {
        *count = total;
        return TL_OK;
    }
    const int ndim = in->ndim;
    if (out->dtype != TL_I64 || out->ndim != 2 || out->shape[0] != total || out->shape[1] != ndim ||
        !tl_is_contiguous(out))
        return tl_error(TL_ERR_SHAPE,
                        "nonzero: kernel expected a contiguous int64 output [%lld, %d]",
                        (long long)total, ndim);
    if (ndim == 0 || total == 0) return TL_OK; /* nothing to write */
    int64_t *rows = tl_data(out);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t b = c * chunk, e = b + chunk < n ? b + chunk : n;
        if (b >= e) continue;
        int64_t coord[TL_MAX_DIMS], j = b;
        for (int d = ndim - 1; d >= 0; d--) { /* the coordinates of element b */
            coord[d] = j % in->shape[d];
            j /= in->shape[d];
        }
        ops->write(x, b, e, in->shape, ndim, coord, rows + starts[c] * ndim);
    }
    return TL_OK;
}

DEFINE_NONZERO(f32, float, NZ_FLOAT)
DEFINE_NONZERO(f64, double, NZ_FLOAT)
DEFINE_NONZERO(bf16, uint16_t, NZ_HALF)
DEFINE_NONZERO(f16, uint16_t, NZ_HALF)
DEFINE_NONZERO(i32, int32_t, NZ_INT)
DEFINE_NONZERO(i64, int64_t, NZ_INT)
DEFINE_NONZERO(b8, uint8_t, NZ_INT)

static const tl_kernel_entry entries[] = {
    TL_CPU_KERNELS_ALL(cumsum, scan, cumsum),
    TL_CPU_KERNELS_ALL(nonzero, nonzero, nonzero),
};

TL_KERNEL_TABLE(tl_cpu_scan_table, TL_DEVICE_CPU, entries);
