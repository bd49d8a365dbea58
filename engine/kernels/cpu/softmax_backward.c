/* CPU softmax / log_softmax backward along one dim, fused: y * (g - sum(g * y)), g - exp(y) *
   sum(g); bfloat16/float16 compute in float32, row sums in double; safe in place. */
#include "kernels/cpu/loop.h"
#include "kernels/cpu/nn_kernels.h"

#define LANE_BLOCK         64
#define PARALLEL_THRESHOLD 16384

/* The tensors of a kernel: grad_input (written), grad and output (read). */
enum { GI, G, Y, TENSORS };

/* As cpu/softmax.c's plan: `outer` positions times `lanes` kept elements (a unit-stride kept
   dim of grad_input walked in the inner loop, when the softmax dim is not unit-stride) times
   `len` elements along dim, with the strides of each tensor (grad's may be 0: expanded). */
typedef struct backward_plan {
    int64_t len, step[TENSORS];
    int64_t lanes, lane[TENSORS];
    int nouter;
    int64_t outer_shape[TL_MAX_DIMS], outer_stride[TENSORS][TL_MAX_DIMS];
    int64_t outer, blocks;
} backward_plan;

static void make_plan(backward_plan *p, const tl_tensor *const *t, int dim) {
    memset(p, 0, sizeof *p);
    const tl_tensor *gi = t[GI];
    p->len = gi->shape[dim];
    for (int k = 0; k < TENSORS; k++) p->step[k] = t[k]->strides[dim];
    const int lane = p->len <= 1 || p->step[GI] != 1 ? tl_cpu_unit_lane(gi, dim) : -1;
    p->lanes = lane >= 0 ? gi->shape[lane] : 1;
    if (lane >= 0)
        for (int k = 0; k < TENSORS; k++) p->lane[k] = t[k]->strides[lane];
    p->outer = 1;
    for (int d = 0; d < gi->ndim; d++) {
        if (d == dim || d == lane || gi->shape[d] == 1) continue;
        int i = p->nouter++;
        p->outer_shape[i] = gi->shape[d];
        for (int k = 0; k < TENSORS; k++) p->outer_stride[k][i] = t[k]->strides[d];
        p->outer *= gi->shape[d];
    }
    p->blocks = (p->lanes + LANE_BLOCK - 1) / LANE_BLOCK;
}

/* Element offsets of work item `item` in each tensor; returns its number of lanes. */
static int64_t locate(const backward_plan *p, int64_t item, int64_t *off) {
    int64_t o = item / p->blocks, l0 = (item % p->blocks) * LANE_BLOCK;
    for (int k = 0; k < TENSORS; k++) off[k] = l0 * p->lane[k];
    for (int d = p->nouter - 1; d >= 0; d--) {
        int64_t i = o % p->outer_shape[d];
        o /= p->outer_shape[d];
        for (int k = 0; k < TENSORS; k++) off[k] += i * p->outer_stride[k][d];
    }
    int64_t left = p->lanes - l0;
    return left < LANE_BLOCK ? left : LANE_BLOCK;
}

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
    static void block_##sfx(const backward_plan *p, char *gi_base, const char *g_base,             \
                            const char *y_base, int64_t lanes, bool log_mode) {                    \
        T *gi = (T *)gi_base;                                                                      \
        const T *g = (const T *)g_base, *y = (const T *)y_base;                                    \
        const int64_t *step = p->step, *lane = p->lane;                                            \
        if (lanes == 1) {                                                                          \
            if (step[GI] == 1 && step[G] == 1 && step[Y] == 1)                                     \
                row_##sfx(p->len, gi, 1, g, 1, y, 1, log_mode);                                    \
            else                                                                                   \
                row_##sfx(p->len, gi, step[GI], g, step[G], y, step[Y], log_mode);                 \
            return;                                                                                \
        }                                                                                          \
        double sum[LANE_BLOCK];                                                                    \
        for (int64_t l = 0; l < lanes; l++) sum[l] = 0;                                            \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *grow = g + r * step[G], *yrow = y + r * step[Y];                              \
            if (log_mode)                                                                          \
                for (int64_t l = 0; l < lanes; l++) sum[l] += LOAD(grow[l * lane[G]]);             \
            else                                                                                   \
                for (int64_t l = 0; l < lanes; l++)                                                \
                    sum[l] += LOAD(grow[l * lane[G]]) * LOAD(yrow[l * lane[Y]]);                   \
        }                                                                                          \
        C total[LANE_BLOCK];                                                                       \
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

typedef void (*block_fn)(const backward_plan *p, char *gi, const char *g, const char *y,
                         int64_t lanes, bool log_mode);

static tl_status run(block_fn block, tl_tensor *grad_input, const tl_tensor *grad,
                     const tl_tensor *output, int dim, bool log_mode) {
    if (tl_numel(grad_input) == 0) return TL_OK; /* else blocks of lanes would walk an empty dim */
    const tl_tensor *tensors[TENSORS] = {grad_input, grad, output};
    backward_plan p;
    make_plan(&p, tensors, dim);
    int64_t items = p.outer * p.blocks, size = (int64_t)tl_dtype_size(grad_input->dtype);
    char *gi_data = tl_data(grad_input);
    const char *g_data = tl_data(grad), *y_data = tl_data(output);
#pragma omp parallel for if (items > 1 && p.outer * p.lanes * p.len > PARALLEL_THRESHOLD)
    for (int64_t item = 0; item < items; item++) {
        int64_t off[TENSORS];
        int64_t lanes = locate(&p, item, off);
        block(&p, gi_data + off[GI] * size, g_data + off[G] * size, y_data + off[Y] * size, lanes,
              log_mode);
    }
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
