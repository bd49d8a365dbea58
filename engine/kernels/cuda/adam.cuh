/* Internal: the Adam/AdamW step of the CUDA optimizer kernels (optim.cu, optim_multi.cu): its
   scalars computed on the host in double as the CPU computes them, and one element's update with
   the CPU's arithmetic, operation for operation (no FMA contraction). */
#ifndef TLUA_CUDA_ADAM_CUH
#define TLUA_CUDA_ADAM_CUH

#include <math.h>

#include "kernels/cuda/cuda_kernels.h" /* tl_optim_args */
#include "kernels/cuda/ops_common.cuh"

/* The step's scalars in double, as cpu/optim.c and cpu/optim_multi.c compute them; the device
   rounds them to the compute type. */
typedef struct tl_cuda_adam_scalars {
    double neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
    bool decoupled, l2;
} tl_cuda_adam_scalars;

/* (lr and step: a's, or the ones a's hyper holds, read on the device) */
__host__ __device__ static inline tl_cuda_adam_scalars
tl_cuda_adam_scalars_at(const tl_optim_args &a, double lr, double step) {
    const double correction1 = 1 - pow(a.beta1, step);
    const double correction2 = 1 - pow(a.beta2, step);
    tl_cuda_adam_scalars s{};
    s.neg_step_size = -(lr / correction1);
    s.correction2_sqrt = sqrt(correction2);
    s.beta1 = a.beta1;
    s.beta2 = a.beta2;
    s.one_minus_beta1 = 1 - a.beta1;
    s.one_minus_beta2 = 1 - a.beta2;
    s.eps = a.eps;
    s.wd = a.weight_decay;
    s.shrink = 1 - lr * a.weight_decay;
    s.decoupled = a.decoupled;
    s.l2 = !a.decoupled && a.weight_decay != 0;
    return s;
}

static inline tl_cuda_adam_scalars tl_cuda_adam_scalars_of(const tl_optim_args *a) {
    return tl_cuda_adam_scalars_at(*a, a->lr, (double)a->step);
}

/* The scalars in the compute type C. */
template <typename C> struct tl_adam_consts {
    C neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
    bool decoupled, l2;
    __device__ explicit tl_adam_consts(const tl_cuda_adam_scalars &s)
        : neg_step_size((C)s.neg_step_size), correction2_sqrt((C)s.correction2_sqrt),
          beta1((C)s.beta1), beta2((C)s.beta2), one_minus_beta1((C)s.one_minus_beta1),
          one_minus_beta2((C)s.one_minus_beta2), eps((C)s.eps), wd((C)s.wd), shrink((C)s.shrink),
          decoupled(s.decoupled), l2(s.l2) {}
};

/* torch.optim.Adam / AdamW on one element: p *= 1 - lr * wd (AdamW); g += wd * p (Adam with wd);
   m = m * beta1 + (1 - beta1) * g; v = v * beta2 + (1 - beta2) * g * g;
   p += -step_size * (m / (sqrt(v) / sqrt(bias_correction2) + eps)). The moments are updated in
   place, the new parameter returned. */
template <typename C>
__device__ __forceinline__ C tl_adam_elem(C p, C g, C &m, C &v, const tl_adam_consts<C> &k) {
    if (k.decoupled) p = tl_mul(p, k.shrink);
    if (k.l2) g = tl_add(g, tl_mul(k.wd, p));
    C mi = tl_mul(m, k.beta1);
    mi = tl_add(mi, tl_mul(k.one_minus_beta1, g));
    C vi = tl_mul(v, k.beta2);
    vi = tl_add(vi, tl_mul(tl_mul(k.one_minus_beta2, g), g));
    const C denom = tl_add(tl_div(tl_sqrt(vi), k.correction2_sqrt), k.eps);
    m = mi, v = vi;
    return tl_add(p, tl_mul(k.neg_step_size, tl_div(mi, denom)));
}

#endif
