/* CUDA fused in-place optimizer steps (SGD, Adam/AdamW) and their table, the dtypes of
   cpu/optim.c: its hyper-parameters computed on the host in double exactly as it computes them,
   then its update rules with its arithmetic, operation for operation (each rounded on its own, no
   FMA contraction), so a step gives the CPU's values bit for bit. */
#include "kernels/cuda/adam.cuh"
#include "kernels/cuda/describe.cuh"

#define OPTIM_THREADS 256

/* The hyper-parameters already in the form the CPU kernels compute them (in double); the device
   rounds them to the compute type as the CPU does. */
typedef struct tl_cuda_optim {
    tl_cuda_where at;
    int dtype;
    int64_t n;
    void *param, *state0, *state1; /* state0/state1 NULL where unused */
    const void *grad;
    /* sgd */
    double weight_decay, momentum, keep, neg_lr;
    bool decay, nesterov, first_step;
    /* adam */
    tl_cuda_adam_scalars adam;
} tl_cuda_optim;

/* torch.optim.SGD: d = g (+ weight_decay * p); buf = d on the first step, else
   buf * momentum + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf; p -= lr * d */
template <class E>
__global__ void __launch_bounds__(OPTIM_THREADS)
    sgd_kernel(typename E::T *p, const typename E::T *g, typename E::T *buf, int64_t n, double wd_,
               double momentum_, double keep_, double neg_lr_, bool decay, bool nesterov,
               bool first) {
    typedef typename E::C C;
    const C wd = (C)wd_, momentum = (C)momentum_, keep = (C)keep_, neg_lr = (C)neg_lr_;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const C pi = E::load(p[i]);
        C d = E::load(g[i]);
        if (decay) d = tl_add(d, tl_mul(wd, pi));
        if (buf) {
            C b;
            if (first) {
                b = d;
            } else {
                b = tl_mul(E::load(buf[i]), momentum);
                b = tl_add(b, tl_mul(keep, d));
            }
            buf[i] = E::store(b);
            d = nesterov ? tl_add(d, tl_mul(momentum, b)) : b;
        }
        p[i] = E::store(tl_add(pi, tl_mul(neg_lr, d)));
    }
}

static tl_status launch_sgd(const tl_cuda_optim *o) {
    return tl_cuda_floating(o->dtype, o->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(o->n, OPTIM_THREADS), o->at.sm_count);
        sgd_kernel<E><<<grid, OPTIM_THREADS, 0, o->at.stream>>>(
            (T *)o->param, (const T *)o->grad, (T *)o->state0, o->n, o->weight_decay, o->momentum,
            o->keep, o->neg_lr, o->decay, o->nesterov, o->first_step);
        return tl_cuda_check_launch(o->at.op);
    });
}

/* tl_adam_elem on each element; the moments in the param's dtype */
template <class E>
__global__ void __launch_bounds__(OPTIM_THREADS)
    adam_kernel(typename E::T *p, const typename E::T *g, typename E::T *m, typename E::T *v,
                int64_t n, tl_cuda_adam_scalars s) {
    typedef typename E::C C;
    const tl_adam_consts<C> k(s);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        C mi = E::load(m[i]), vi = E::load(v[i]);
        const C pi = tl_adam_elem<C>(E::load(p[i]), E::load(g[i]), mi, vi, k);
        m[i] = E::store(mi);
        v[i] = E::store(vi);
        p[i] = E::store(pi);
    }
}

static tl_status launch_adam(const tl_cuda_optim *o) {
    return tl_cuda_floating(o->dtype, o->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(o->n, OPTIM_THREADS), o->at.sm_count);
        adam_kernel<E><<<grid, OPTIM_THREADS, 0, o->at.stream>>>(
            (T *)o->param, (const T *)o->grad, (T *)o->state0, (T *)o->state1, o->n, o->adam);
        return tl_cuda_check_launch(o->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* The description of a step of param with grad and the states (NULL where unused); the
   hyper-parameters are the caller's to set. */
static tl_cuda_optim optim_of(tl_tensor *param, const tl_tensor *grad, tl_tensor *state0,
                              tl_tensor *state1) {
    tl_cuda_optim o{};
    o.dtype = tl_cuda_dtype_of(param);
    o.n = tl_numel(param);
    o.param = tl_data(param);
    o.grad = tl_data(grad);
    o.state0 = tl_cuda_data(state0);
    o.state1 = tl_cuda_data(state1);
    return o;
}

static tl_status cuda_sgd_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *buffer,
                               tl_tensor *unused, const tl_optim_args *a) {
    (void)unused;
    tl_cuda_optim o = optim_of(param, grad, a->momentum != 0 ? buffer : nullptr, nullptr);
    o.weight_decay = a->weight_decay;
    o.momentum = a->momentum;
    o.keep = 1 - a->dampening;
    o.neg_lr = -a->lr;
    o.decay = a->weight_decay != 0;
    o.nesterov = a->nesterov;
    o.first_step = a->first_step;
    if (o.n == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(param, "sgd_step", &o.at));
    return launch_sgd(&o);
}

static tl_status cuda_adam_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,
                                tl_tensor *exp_avg_sq, const tl_optim_args *a) {
    tl_cuda_optim o = optim_of(param, grad, exp_avg, exp_avg_sq);
    o.adam = tl_cuda_adam_scalars_of(a);
    if (o.n == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(param, "adam_step", &o.at));
    return launch_adam(&o);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(sgd_step, TL_DTYPES_FLOATING, optim, cuda_sgd_step),
    TL_KERNEL(adam_step, TL_DTYPES_FLOATING, optim, cuda_adam_step),
};

TL_KERNEL_TABLE(tl_cuda_optim_table, TL_DEVICE_CUDA, entries);
