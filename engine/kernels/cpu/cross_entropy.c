/* CPU cross entropy: fused stable log-softmax + NLL forward and its backward; the row losses and
   in-place logit gradients of the chunked classifier (linear_cross_entropy). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/nn_kernels.h"

static inline int64_t target_at(const tl_tensor *target, int64_t i) {
    return target->dtype == TL_I64 ? ((const int64_t *)tl_data(target))[i]
                                   : (int64_t)((const int32_t *)tl_data(target))[i];
}

/* A row's log-sum-exp over its K classes, max + log(sum(exp(x - max))), the sums in double (any
   NaN gives NaN), and the sum of the row (label smoothing's) in *sum_x. */
#define DEFINE_ROW_LSE(suffix, T, C, LOAD, STORE)                                                  \
    static double row_lse_##suffix(const T *row, int64_t K, double *sum_x) {                       \
        C max = LOAD(row[0]);                                                                      \
        for (int64_t k = 1; k < K; k++) {                                                          \
            C v = LOAD(row[k]);                                                                    \
            if (v > max || v != v) max = v;                                                        \
        }                                                                                          \
        double sum = 0, sum_of_x = 0;                                                              \
        for (int64_t k = 0; k < K; k++) {                                                          \
            C v = LOAD(row[k]);                                                                    \
            sum += (double)NN_EXP(v - max);                                                        \
            sum_of_x += (double)v;                                                                 \
        }                                                                                          \
        *sum_x = sum_of_x;                                                                         \
        return (double)max + log(sum);                                                             \
    }

NN_FOR_FLOATING(DEFINE_ROW_LSE)

/* T: the logits' element type; C: the compute type (also lse's); row losses are summed in
   double in row order. loss_i = lse - (1 - s) x[t] - s / C_classes * sum(x). */
#define DEFINE_CROSS_ENTROPY(suffix, T, C, LOAD, STORE)                                            \
    static tl_status cross_entropy_##suffix(tl_tensor *loss, tl_tensor *lse,                       \
                                            const tl_tensor *logits, const tl_tensor *target,      \
                                            double smoothing) {                                    \
        const int64_t N = logits->shape[0], K = logits->shape[1], work = N * K;                    \
        const T *x = tl_data(logits);                                                              \
        C *lse_out = tl_data(lse);                                                                 \
        double *row_loss = malloc((size_t)(N > 0 ? N : 1) * sizeof *row_loss);                     \
        if (!row_loss)                                                                             \
            return tl_error(TL_ERR_MEMORY, "cross_entropy: out of memory for %lld row losses",     \
                            (long long)N);                                                         \
        NN_PARALLEL_FOR(work) for (int64_t i = 0; i < N; i++) {                                    \
            const T *row = x + i * K;                                                              \
            double sum_x;                                                                          \
            const double l = row_lse_##suffix(row, K, &sum_x);                                     \
            lse_out[i] = (C)l;                                                                     \
            const double picked = (double)LOAD(row[target_at(target, i)]);                         \
            row_loss[i] = l - (1 - smoothing) * picked - smoothing / (double)K * sum_x;            \
        }                                                                                          \
        double total = 0;                                                                          \
        for (int64_t i = 0; i < N; i++) total += row_loss[i];                                      \
        free(row_loss);                                                                            \
        *(T *)tl_data(loss) = STORE((C)(total / (double)N));                                       \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_CROSS_ENTROPY)

/* grad[i, k] = (exp(x[i, k] - lse[i]) - s / K - (1 - s) [k == target[i]]) * grad_loss / N */
#define DEFINE_CROSS_ENTROPY_BACKWARD(suffix, T, C, LOAD, STORE)                                   \
    static tl_status cross_entropy_backward_##suffix(                                              \
        tl_tensor *grad_logits, const tl_tensor *grad_loss, const tl_tensor *logits,               \
        const tl_tensor *lse, const tl_tensor *target, double smoothing) {                         \
        const int64_t N = logits->shape[0], K = logits->shape[1], work = N * K;                    \
        const T *x = tl_data(logits);                                                              \
        const C *l = tl_data(lse);                                                                 \
        T *out = tl_data(grad_logits);                                                             \
        const C scale = (C)((double)LOAD(*(const T *)tl_data(grad_loss)) / (double)N);             \
        const C off = (C)(smoothing / (double)K), on = (C)(1 - smoothing);                         \
        NN_PARALLEL_FOR(work) for (int64_t i = 0; i < N; i++) {                                    \
            const T *row = x + i * K;                                                              \
            T *o = out + i * K;                                                                    \
            const C li = l[i];                                                                     \
            for (int64_t k = 0; k < K; k++)                                                        \
                o[k] = STORE((NN_EXP(LOAD(row[k]) - li) - off) * scale);                           \
            const int64_t t = target_at(target, i);                                                \
            o[t] = STORE((NN_EXP(LOAD(row[t]) - li) - off - on) * scale);                          \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_CROSS_ENTROPY_BACKWARD)

/* Per row of logits [rows, L] (classes the first columns): lse = max + log(sum(exp(x - max))),
   loss = lse - (1 - s) x[t] - s/classes sum(x) (0 on an ignored row); with write_grad the row
   becomes (exp(x - lse) - s/classes - (1 - s) [k == t]) * scale, the padding columns 0. */
#define DEFINE_CROSS_ENTROPY_ROWS(suffix, T, C, LOAD, STORE)                                       \
    static tl_status cross_entropy_rows_##suffix(tl_tensor *row_loss, tl_tensor *logits,           \
                                                 const tl_tensor *target, const tl_tensor *scale,  \
                                                 const tl_cross_entropy_rows_args *a) {            \
        const int64_t N = logits->shape[0], L = logits->shape[1], K = a->classes, work = N * L;    \
        T *x = tl_data(logits);                                                                    \
        C *loss = tl_data(row_loss);                                                               \
        const C by = *(const C *)tl_data(scale);                                                   \
        const double s = a->label_smoothing;                                                       \
        const C off = (C)(s / (double)K), on = (C)(1 - s);                                         \
        NN_PARALLEL_FOR(work) for (int64_t i = 0; i < N; i++) {                                    \
            T *row = x + i * L;                                                                    \
            const int64_t given = target_at(target, i), t = given - a->first_class;                \
            const bool ignored = a->has_ignore && given == a->ignore_index;                        \
            double sum_x;                                                                          \
            const double lse = row_lse_##suffix(row, K, &sum_x);                                   \
            loss[i] = ignored ? (C)0                                                               \
                              : (C)(lse - (1 - s) * (double)LOAD(row[t]) - s / (double)K * sum_x); \
            if (!a->write_grad) continue;                                                          \
            const C l = (C)lse, g = ignored ? (C)0 : by;                                           \
            for (int64_t k = 0; k < K; k++) {                                                      \
                C d = NN_EXP(LOAD(row[k]) - l) - off;                                              \
                if (k == t) d -= on;                                                               \
                row[k] = STORE(d * g);                                                             \
            }                                                                                      \
            for (int64_t k = K; k < L; k++) row[k] = STORE((C)0);                                  \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_CROSS_ENTROPY_ROWS)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(cross_entropy, cross_entropy, cross_entropy),
    TL_KERNELS_FLOATING(cross_entropy_backward, cross_entropy_backward, cross_entropy_backward),
    TL_KERNELS_FLOATING(linear_cross_entropy, cross_entropy_rows, cross_entropy_rows),
};

TL_KERNEL_TABLE(tl_cpu_cross_entropy_table, TL_DEVICE_CPU, entries);
