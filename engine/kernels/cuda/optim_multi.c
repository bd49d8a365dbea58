/* CUDA multi-tensor Adam/AdamW (adam_step_multi), the C side: a descriptor per parameter and
   their chunk offsets built on the host, put on the device with one copy on the stream, then one
   launch for every parameter (device code in cuda/optim_multi.cu). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/optim_multi_launch.h"

#define OP_NAME "adam_step_multi"

static bool aligned(const void *p, size_t element_size) {
    return p == NULL || (uintptr_t)p % (4 * element_size) == 0;
}

static tl_cuda_adam_scalars scalars_of(const tl_optim_args *a) {
    const double correction1 = 1 - pow(a->beta1, (double)a->step);
    const double correction2 = 1 - pow(a->beta2, (double)a->step);
    return (tl_cuda_adam_scalars){
        .neg_step_size = -(a->lr / correction1),
        .correction2_sqrt = sqrt(correction2),
        .beta1 = a->beta1,
        .beta2 = a->beta2,
        .one_minus_beta1 = 1 - a->beta1,
        .one_minus_beta2 = 1 - a->beta2,
        .eps = a->eps,
        .wd = a->weight_decay,
        .shrink = 1 - a->lr * a->weight_decay,
        .decoupled = a->decoupled,
        .l2 = !a->decoupled && a->weight_decay != 0,
    };
}

static tl_status adam_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                            tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                            tl_tensor *const *master, int64_t n, const tl_optim_args *args) {
    if (n <= 0) return TL_OK;
    tl_cuda_adam_param *host = malloc(sizeof *host * (size_t)n);
    if (!host)
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld params)", (long long)n);
    int64_t count = 0, chunks = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(params[i]);
        if (numel == 0) continue;
        const size_t size = tl_dtype_size(params[i]->dtype),
                     moment = tl_dtype_size(exp_avg[i]->dtype);
        tl_cuda_adam_param *d = &host[count++];
        d->param = tl_data(params[i]);
        d->grad = tl_data(grads[i]);
        d->exp_avg = tl_data(exp_avg[i]);
        d->exp_avg_sq = tl_data(exp_avg_sq[i]);
        d->master = master && master[i] ? tl_data(master[i]) : NULL;
        d->numel = numel;
        d->first_chunk = chunks;
        d->dtype = (int32_t)params[i]->dtype;
        d->vec = aligned(d->param, size) && aligned(d->grad, size) && aligned(d->exp_avg, moment) &&
                 aligned(d->exp_avg_sq, moment) && aligned(d->master, sizeof(float));
        chunks += (numel + TL_CUDA_ADAM_CHUNK - 1) / TL_CUDA_ADAM_CHUNK;
    }
    tl_status status = TL_OK;
    if (count > 0) {
        tl_cuda_where at = {0};
        void *device = NULL;
        const size_t bytes = sizeof *host * (size_t)count;
        status = tl_cuda_where_of(params[0], OP_NAME, &at);
        if (status == TL_OK) status = tl_cuda_malloc(at.device, bytes, OP_NAME, &device);
        if (status == TL_OK) {
            /* a pageable copy on the stream: staged at once, no wait; the buffer goes back to the
               cache behind the launch, in stream order */
            cudaError_t err =
                cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, at.stream);
            if (err != cudaSuccess) status = tl_cuda_fail(err, OP_NAME, "parameter descriptors");
        }
        if (status == TL_OK) {
            const tl_cuda_adam_scalars s = scalars_of(args);
            status = tl_cuda_adam_multi_run(&at, device, count, chunks, &s);
        }
        if (device) tl_cuda_free(at.device, device);
    }
    free(host);
    return status;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(adam_step_multi, TL_DTYPES_FLOATING, optim_multi, adam_multi),
};

TL_KERNEL_TABLE(tl_cuda_optim_multi_table, TL_DEVICE_CUDA, entries);
