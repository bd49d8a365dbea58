/* CPU softmax / log_softmax backward along one dim, fused: y * (g - sum(g * y)), g - exp(y) *
   sum(g); bfloat16/float16 compute in float32, row sums in double; safe in place. */
#include "kernels/cpu/loop.h"
#include "kernels/cpu/nn_kernels.h"

#define PARALLEL_THRESHOLD 16384

/* The tensors of a kernel, walked along loop.h's lines: grad_input (written), grad and output
   (read; grad's strides may be 0: expanded). */
enum { GI, G, Y, TENSORS };

/* One block of lanes. The row sums first (sum(g * y) for softmax, sum(g) for log_softmax, in
   double, each product in the compute type C), then each element: its g and y are read before
   its grad_input is written, so grad_input may be grad or output itself (no restrict: the
   pointers may alias). */
#define DEFINE_BACKWARD(sfx, T, C, LOAD, STORE)                                                    \
    static inline void row_##sfx(int64_t len, T *gi, int64_t sgi, const T *g, int64_t sg,          \
                                 const T *y, int64_t sy, bool log_mode) {                          \
        double sum = 0;                                                                            \
        if (log_mode)                                                                              \
            for (int64_t r = 0; r < len; r++) sum += LOAD(g[r * sg]);                              \
        else                                                                                       \
            for (int64_t r = 0; r < len; r++) sum += LOAD(g[r * sg]) * LOAD(y[r * sy]);            \
        const C total = (C)sum;                                                                    \
        for (int64_t r = 0; r < len; r++) {                                                        \
            C gv = LOAD(g[r * sg]), yv = LOAD(y[r * sy]);                                          \
            gi[r * sgi] = STORE(log_mode ? gv - NN_EXP(yv) * total : yv * (gv - total));           \
        }                                                                                          \
    }                                                                                              \
    static void block_##sfx(const tl_cpu_lines *p, char *const *at, int64_t lanes,                 \
                            const void *mode) {                                                    \
        const bool log_mode = *(const bool *)mode;                                                 \
        T *gi = (T *)at[GI];                                                                       \
        const T *g = (const T *)at[G], *y = (const T *)at[Y];                                      \
        const int64_t *step = p->step, *lane = p->lane;                                            \
        if (lanes == 1) {                                                                          \
            if (step[GI] == 1 && step[G] == 1 && step[Y] == 1)                                     \
                row_##sfx(p->len, gi, 1, g, 1, y, 1, log_mode);                                    \
            else                                                                                   \
                row_##sfx(p->len, gi, step[GI], g, step[G], y, step[Y], log_mode);                 \
            return;                                                                                \
        }                                                                                          \
        double sum[TL_CPU_LANE_BLOCK];                                                             \
        for (int64_t l = 0; l < lanes; l++) sum[l] = 0;                                            \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *grow = g + r * step[G], *yrow = y + r * step[Y];                              \
            if (log_mode)                                                                          \
                for (int64_t l = 0; l < lanes; l++) sum[l] += LOAD(grow[l * lane[G]]);             \
            else                                                                                   \
                for (int64_t l = 0; l < lanes; l++)                                                \
                    sum[l] += LOAD(grow[l * lane[G]]) * LOAD(yrow[l * lane[Y]]);                   \
        }                                                                                          \
        C total[TL_CPU_LANE_BLOCK];                                                                \
        for (int64_t l = 0; l < lanes; l++) total[l] = (C)sum[l];                                  \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            T *out = gi + r * step[GI];                                                            \
            const T *grow = g + r * step[G], *yrow = y + r * step[Y];                              \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                C gv = LOAD(grow[l * lane[G]]), yv = LOAD(yrow[l * lane[Y]]);                      \
                out[l * lane[GI]] =                                                                \
                    STORE(log_mode ? gv - NN_EXP(yv) * total[l] : yv * (gv - total[l]));           \
            }                                                                                      \
        }                                                                                          \
    }
NN_FOR_FLOATING(DEFINE_BACKWARD)

static tl_status run(tl_cpu_lines_fn block, tl_tensor *grad_input, const tl_tensor *grad,
                     const tl_tensor *output, int dim, bool log_mode) {
    if (tl_numel(grad_input) == 0) return TL_OK; /* else blocks of lanes would walk an empty dim */
    tl_cpu_lines lines;
    tl_cpu_lines_plan(&lines, TENSORS, (const tl_tensor *[]){grad_input, grad, output}, dim);
    tl_cpu_lines_for_each(&lines, PARALLEL_THRESHOLD, block, &log_mode);
    return TL_OK;
}

#define DEFINE_KERNELS(sfx, T, C, LOAD, STORE)                                                     \
    static tl_status softmax_backward_##sfx(tl_tensor *grad_input, const tl_tensor *grad,          \
                                            const tl_tensor *output, int dim) {                    \
        return run(block_##sfx, grad_input, grad, output, dim, false);                             \
    }                                                                                              \
    static tl_status log_softmax_backward_##sfx(tl_tensor *grad_input, const tl_tensor *grad,      \
                                                const tl_tensor *output, int dim) {                \
        return run(block_##sfx, grad_input, grad, output, dim, true);                              \
    }
NN_FOR_FLOATING(DEFINE_KERNELS)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(softmax_backward, softmax_backward, softmax_backward),
    TL_KERNELS_FLOATING(log_softmax_backward, softmax_backward, log_softmax_backward),
};

TL_KERNEL_TABLE(tl_cpu_softmax_backward_table, TL_DEVICE_CPU, entries);
