/* CPU kernels of the cumulative ops along one dim (family CUMULATIVE): cumprod, logcumsumexp,
   cummax and cummin, each line walked in order (loop.h's lines, any strides). */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/reduction.h"

/* The running state of a line: floating inputs in double (f: the fold of reduction.h), integer
   and bool inputs in int64 / uint64 (i), and cummax / cummin's value and index. */
typedef enum cum_kind { CUM_PROD, CUM_LSE, CUM_MAX, CUM_MIN } cum_kind;
typedef struct cum_call {
    cum_kind kind;
    tl_dtype in, out; /* the input's and the values' dtypes */
} cum_call;

/* elements as numbers and back, through the engine's one conversion of each dtype (bool: any
   non-zero byte is true; a floating value rounded once) */
static double load_f(const char *p, tl_dtype d) {
    return tl_scalar_to_double(tl_dtype_load(d, p));
}
static int64_t load_i(const char *p, tl_dtype d) {
    return tl_scalar_to_int(tl_dtype_load(d, p));
}
static void store_f(char *p, tl_dtype d, double v) {
    tl_dtype_store(d, p, tl_scalar_float(v));
}
static void store_i(char *p, tl_dtype d, int64_t v) {
    tl_dtype_store(d, p, tl_scalar_int(v));
}

/* cummax (cummin): the running extreme and the position it was last reached at: an element
   equal to it (ties) or a NaN takes its place, so a NaN stays with the latest NaN's index, as
   torch's */
static bool takes_extreme_f(double x, double current, bool max) {
    return x != x || (max ? x >= current : x <= current);
}
static bool takes_extreme_i(int64_t x, int64_t current, bool max) {
    return max ? x >= current : x <= current;
}

enum { IN, OUT, IDX };

/* One line: in at at[IN] (step[IN] apart), values at at[OUT], indices (cummax, cummin) at at[IDX].
 */
static void scan_line(const tl_cpu_lines *p, const char *in, char *out, char *idx,
                      const cum_call *c) {
    const int64_t sin = p->step[IN] * p->size[IN], sout = p->step[OUT] * p->size[OUT];
    const bool floating = tl_dtype_is_floating(c->in), max = c->kind == CUM_MAX;
    if (c->kind == CUM_MAX || c->kind == CUM_MIN) {
        const int64_t sidx = p->step[IDX] * p->size[IDX];
        double ef = 0;
        int64_t ei = 0, at = 0;
        for (int64_t r = 0; r < p->len; r++) {
            const char *x = in + r * sin;
            if (floating) {
                const double v = load_f(x, c->in);
                if (r == 0 || takes_extreme_f(v, ef, max)) ef = v, at = r;
                store_f(out + r * sout, c->out, ef);
            } else {
                const int64_t v = load_i(x, c->in);
                if (r == 0 || takes_extreme_i(v, ei, max)) ei = v, at = r;
                store_i(out + r * sout, c->out, ei);
            }
            *(int64_t *)(idx + r * sidx) = at;
        }
        return;
    }
    if (!floating) { /* cumprod of integers and bool: int64, wrapping */
        tl_ifold s;
        tl_ifold_prod_init(&s);
        for (int64_t r = 0; r < p->len; r++) {
            tl_ifold_prod_step(&s, load_i(in + r * sin, c->in));
            *(int64_t *)(out + r * sout) = tl_ifold_prod_finish(&s, r + 1);
        }
        return;
    }
    tl_fold s;
    if (c->kind == CUM_PROD)
        tl_fold_prod_init(&s, 0);
    else
        tl_fold_logsumexp_init(&s, 0);
    for (int64_t r = 0; r < p->len; r++) {
        const double x = load_f(in + r * sin, c->in);
        double y;
        if (c->kind == CUM_PROD) {
            tl_fold_prod_step(&s, x, 0);
            y = tl_fold_prod_finish(&s, r + 1, 0);
        } else {
            tl_fold_logsumexp_step(&s, x, 0);
            y = tl_fold_logsumexp_finish(&s, r + 1, 0);
        }
        store_f(out + r * sout, c->out, y);
    }
}

static void scan_lines(const tl_cpu_lines *p, char *const *at, int64_t lanes, const void *ctx) {
    const cum_call *c = ctx;
    for (int64_t l = 0; l < lanes; l++) {
        char *idx = at[IDX] ? at[IDX] + l * p->lane[IDX] * p->size[IDX] : NULL;
        scan_line(p, at[IN] + l * p->lane[IN] * p->size[IN],
                  at[OUT] + l * p->lane[OUT] * p->size[OUT], idx, c);
    }
}

/* out[0] the values (out[1] the int64 indices of cummax / cummin), in[0] x, args->dim the dim */
static tl_status run(cum_kind kind, tl_tensor *const *out, const tl_tensor *const *in,
                     const tl_op_args *args) {
    const cum_call c = {kind, in[0]->dtype, out[0]->dtype};
    const bool indexed = kind == CUM_MAX || kind == CUM_MIN;
    const tl_tensor *tensors[3] = {in[0], out[0], indexed ? out[1] : NULL};
    tl_cpu_lines lines;
    tl_cpu_lines_plan(&lines, 3, tensors, args->dim);
    if (lines.items == 0 || lines.len == 0) return TL_OK;
    tl_cpu_lines_for_each(&lines, TL_CPU_PARALLEL_THRESHOLD, scan_lines, &c);
    return TL_OK;
}

static tl_status cpu_cumprod(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    return run(CUM_PROD, out, in, args);
}
static tl_status cpu_logcumsumexp(tl_tensor *const *out, const tl_tensor *const *in,
                                  const tl_op_args *args) {
    return run(CUM_LSE, out, in, args);
}
static tl_status cpu_cummax(tl_tensor *const *out, const tl_tensor *const *in,
                            const tl_op_args *args) {
    return run(CUM_MAX, out, in, args);
}
static tl_status cpu_cummin(tl_tensor *const *out, const tl_tensor *const *in,
                            const tl_op_args *args) {
    return run(CUM_MIN, out, in, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cumprod, TL_DTYPES_ALL, tensors, cpu_cumprod),
    TL_KERNEL(logcumsumexp, TL_DTYPES_FLOATING, tensors, cpu_logcumsumexp),
    TL_KERNEL(cummax, TL_DTYPES_ALL, tensors, cpu_cummax),
    TL_KERNEL(cummin, TL_DTYPES_ALL, tensors, cpu_cummin),
};

TL_KERNEL_TABLE(tl_cpu_cumulative_table, TL_DEVICE_CPU, entries);
