/* CPU fused in-place optimizer steps: SGD and Adam/AdamW with torch.optim's update rules. */
#include <math.h>

#include "kernels/cpu/nn_kernels.h"

/* torch.optim.SGD (maximize=False), per element, C the compute type:
     d = g + weight_decay * p                      (when weight_decay != 0)
     buf = d on the first step, else buf * momentum + (1 - dampening) * d
     d = nesterov ? d + momentum * buf : buf        (when momentum != 0)
     p = p - lr * d */
#define DEFINE_SGD(suffix, T, C, LOAD, STORE)                                                      \
    static tl_status sgd_##suffix(tl_tensor *param, const tl_tensor *grad, tl_tensor *buffer,      \
                                  tl_tensor *unused, const tl_optim_args *a) {                     \
        (void)unused;                                                                              \
        const int64_t n = tl_numel(param);                                                         \
        T *p = tl_data(param);                                                                     \
        const T *g = tl_data(grad);                                                                \
        T *buf = buffer && a->momentum != 0 ? (T *)tl_data(buffer) : NULL;                         \
        const C wd = (C)a->weight_decay, momentum = (C)a->momentum, keep = (C)(1 - a->dampening),  \
                neg_lr = (C)(-a->lr);                                                              \
        const bool decay = a->weight_decay != 0, nesterov = a->nesterov, first = a->first_step;    \
        NN_PARALLEL_FOR(n) for (int64_t i = 0; i < n; i++) {                                       \
            const C pi = LOAD(p[i]);                                                               \
            C d = LOAD(g[i]);                                                                      \
            if (decay) d = d + wd * pi;                                                            \
            if (buf) {                                                                             \
                C b;                                                                               \
                if (first) {                                                                       \
                    b = d;                                                                         \
                } else {                                                                           \
                    b = LOAD(buf[i]) * momentum;                                                   \
                    b = b + keep * d;                                                              \
                }                                                                                  \
                buf[i] = STORE(b);                                                                 \
                d = nesterov ? d + momentum * b : b;                                               \
            }                                                                                      \
            p[i] = STORE(pi + neg_lr * d);                                                         \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_SGD)

/* torch.optim.Adam / AdamW (amsgrad=False, maximize=False), per element:
     p = p * (1 - lr * weight_decay)               (AdamW)
     g = g + weight_decay * p                      (Adam, when weight_decay != 0)
     m = m * beta1 + (1 - beta1) * g
     v = v * beta2 + (1 - beta2) * g * g
     p = p - step_size * m / (sqrt(v) / sqrt(bias_correction2) + eps)
   with bias_correction{1,2} = 1 - beta{1,2}^step and step_size = lr / bias_correction1
   computed in double, as Python computes them. */
#define DEFINE_ADAM(suffix, T, C, LOAD, STORE)                                                     \
    static tl_status adam_##suffix(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,    \
                                   tl_tensor *exp_avg_sq, const tl_optim_args *a) {                \
        const int64_t n = tl_numel(param);                                                         \
        T *p = tl_data(param), *m = tl_data(exp_avg), *v = tl_data(exp_avg_sq);                    \
        const T *g = tl_data(grad);                                                                \
        const double correction1 = 1 - pow(a->beta1, (double)a->step);                             \
        const double correction2 = 1 - pow(a->beta2, (double)a->step);                             \
        const C neg_step_size = (C)(-(a->lr / correction1));                                       \
        const C correction2_sqrt = (C)sqrt(correction2);                                           \
        const C beta1 = (C)a->beta1, beta2 = (C)a->beta2, one_minus_beta1 = (C)(1 - a->beta1),     \
                one_minus_beta2 = (C)(1 - a->beta2), eps = (C)a->eps, wd = (C)a->weight_decay,     \
                shrink = (C)(1 - a->lr * a->weight_decay);                                         \
        const bool decoupled = a->decoupled, l2 = !a->decoupled && a->weight_decay != 0;           \
        NN_PARALLEL_FOR(n) for (int64_t i = 0; i < n; i++) {                                       \
            C pi = LOAD(p[i]), gi = LOAD(g[i]);                                                    \
            if (decoupled) pi = pi * shrink;                                                       \
            if (l2) gi = gi + wd * pi;                                                             \
            C mi = LOAD(m[i]) * beta1;                                                             \
            mi = mi + one_minus_beta1 * gi;                                                        \
            C vi = LOAD(v[i]) * beta2;                                                             \
            vi = vi + one_minus_beta2 * gi * gi;                                                   \
            const C denom = NN_SQRT(vi) / correction2_sqrt + eps;                                  \
            m[i] = STORE(mi);                                                                      \
            v[i] = STORE(vi);                                                                      \
            p[i] = STORE(pi + neg_step_size * (mi / denom));                                       \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_ADAM)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(sgd_step, optim, sgd),
    TL_KERNELS_FLOATING(adam_step, optim, adam),
};

TL_KERNEL_TABLE(tl_cpu_optim_table, TL_DEVICE_CPU, entries);
