/* CUDA clip_grad_norm_multi, the C side: a descriptor per gradient and their chunk offsets built on
   the host and put on the device with one copy on the stream, scratch for the partials and the
   coefficient from the caching allocator, then three launches for every gradient (device code in
   cuda/clip_norm.cu). Nothing waits for the device. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/clip_norm.h"
#include "kernels/cuda/clip_norm_launch.h"
#include "kernels/cuda/cuda_kernels.h"

#define OP_NAME "clip_grad_norm_multi"

static bool aligned(const void *p, size_t element_size) {
    return (uintptr_t)p % (4 * element_size) == 0;
}

/* Descriptors of the non-empty grads in host (n of room): their count, *chunks the chunks. */
static int64_t describe(tl_tensor *const *grads, int64_t n, tl_cuda_clip_grad *host,
                        int64_t *chunks) {
    int64_t count = 0;
    *chunks = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(grads[i]);
        if (numel == 0) continue;
        tl_cuda_clip_grad *d = &host[count++];
        d->data = tl_data(grads[i]);
        d->numel = numel;
        d->first_chunk = *chunks;
        d->dtype = (int32_t)grads[i]->dtype;
        d->vec = aligned(d->data, tl_dtype_size(grads[i]->dtype));
        *chunks += (numel + TL_CUDA_CLIP_CHUNK - 1) / TL_CUDA_CLIP_CHUNK;
    }
    return count;
}

static tl_status clip_multi(tl_tensor *const *grads, int64_t n, double max_norm, double norm_type,
                            tl_tensor *total) {
    tl_cuda_clip_grad *host = malloc(sizeof *host * (size_t)(n > 0 ? n : 1));
    if (!host) return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld grads)", (long long)n);
    int64_t chunks = 0;
    const int64_t count = describe(grads, n, host, &chunks);
    /* one block of scratch: the descriptors, the partials, the coefficient (8-byte aligned) */
    const size_t desc_bytes = sizeof *host * (size_t)count;
    const size_t bytes = desc_bytes + sizeof(double) * (size_t)(chunks + 1);
    tl_cuda_clip c = {
        .count = count,
        .chunks = chunks,
        .total = tl_data(total),
        .total_f64 = total->dtype == TL_F64,
        .mode = tl_clip_norm_mode(norm_type),
        .p = norm_type,
        .max_norm = max_norm,
    };
    void *scratch = NULL;
    tl_status status = tl_cuda_where_of(total, OP_NAME, &c.at);
    if (status == TL_OK) status = tl_cuda_malloc(c.at.device, bytes, OP_NAME, &scratch);
    if (status == TL_OK && count > 0) {
        /* a pageable copy on the stream: staged at once, no wait; the scratch goes back to the
           cache behind the launches, in stream order */
        const cudaError_t err =
            cudaMemcpyAsync(scratch, host, desc_bytes, cudaMemcpyHostToDevice, c.at.stream);
        if (err != cudaSuccess) status = tl_cuda_fail(err, OP_NAME, "gradient descriptors");
    }
    if (status == TL_OK) {
        c.grads = scratch;
        c.partials = (double *)((char *)scratch + desc_bytes);
        c.coef = c.partials + chunks;
        status = tl_cuda_clip_norm_run(&c);
    }
    if (scratch) tl_cuda_free(c.at.device, scratch);
    free(host);
    return status;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(clip_grad_norm_multi, TL_DTYPES_FLOATING, clip_norm_multi, clip_multi),
};

TL_KERNEL_TABLE(tl_cuda_clip_norm_table, TL_DEVICE_CUDA, entries);
