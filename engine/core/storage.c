/* Reference-counted, 64-byte aligned storage and cross-device byte copies. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/storage.h"
#include "tlua/runtime.h"
#ifdef TLUA_HAVE_CUDA
#include "core/cuda/cuda_runtime.h"
#endif

#define TL_ALIGNMENT 64
/* 1 TiB: larger requests are mistakes, refused before asking the system */
#define TL_MAX_ALLOCATION ((size_t)1 << 40)

/* CPU allocation counters: atomics, since several threads may use the engine */
static _Atomic uint64_t cpu_allocated, cpu_peak, cpu_alloc_count, cpu_free_count;

static void cpu_count_alloc(size_t nbytes) {
    uint64_t now = atomic_fetch_add(&cpu_allocated, nbytes) + nbytes;
    uint64_t peak = atomic_load(&cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&cpu_peak, &peak, now)) {
    }
    atomic_fetch_add(&cpu_alloc_count, 1);
}

void tl_cpu_get_memory_stats(tl_cpu_memory_stats *out) {
    uint64_t allocs = atomic_load(&cpu_alloc_count), frees = atomic_load(&cpu_free_count);
    *out = (tl_cpu_memory_stats){
        .allocated_bytes = atomic_load(&cpu_allocated),
        .peak_allocated_bytes = atomic_load(&cpu_peak),
        .active_blocks = allocs - frees,
        .alloc_count = allocs,
        .free_count = frees,
    };
}

void tl_cpu_reset_peak_memory_stats(void) {
    atomic_store(&cpu_peak, atomic_load(&cpu_allocated));
}

/* Frees the header of a storage (its data is gone or was never there), giving its bytes back to
   its budget. */
static void storage_free_header(tl_storage *s) {
    if (s->budget) {
        tl_memory_budget_uncharge(s->budget, s->nbytes);
        tl_memory_budget_release(s->budget);
    }
    free(s);
}

/* A storage header for nbytes of op's (its data still to come): the one-tensor limit checked and
   the bytes charged to the thread's memory budget (an embedded state's memory limit), which
   storage_free_header gives back. */
static tl_status new_header(const char *op, size_t nbytes, tl_storage **out) {
    if (nbytes > TL_MAX_ALLOCATION)
        return tl_error(TL_ERR_MEMORY,
                        "%s: cannot allocate %zu bytes (more than the %llu-byte limit of one "
                        "tensor)",
                        op, nbytes, (unsigned long long)TL_MAX_ALLOCATION);
    tl_memory_budget *budget = tl_thread_memory_budget();
    if (budget && !tl_memory_budget_charge(budget, nbytes))
        return tl_error(TL_ERR_MEMORY,
                        "%s: the memory limit of %zu bytes is exceeded (%zu bytes of tensors "
                        "and Lua heap in use, a tensor of %zu bytes asked)",
                        op, tl_memory_budget_limit(budget), tl_memory_budget_used(budget), nbytes);
    tl_storage *s = calloc(1, sizeof *s);
    if (!s) {
        if (budget) tl_memory_budget_uncharge(budget, nbytes);
        return tl_error(TL_ERR_MEMORY, "%s: out of memory allocating a storage header", op);
    }
    s->nbytes = nbytes;
    if (budget) {
        tl_memory_budget_retain(budget);
        s->budget = budget;
    }
    *out = s;
    return TL_OK;
}

tl_status tl_storage_new(tl_device device, size_t nbytes, tl_storage **out) {
    tl_status status = tl_device_check(device);
    if (status != TL_OK) return status;
    tl_storage *s = NULL;
    TL_TRY(new_header("empty", nbytes, &s));
#ifdef TLUA_HAVE_CUDA
    if (device.type == TL_DEVICE_CUDA) {
        status = tl_cuda_malloc(device.index, nbytes, "empty", &s->data);
        if (status != TL_OK) {
            storage_free_header(s);
            return status;
        }
        s->nbytes = nbytes;
        s->device = device;
        s->refcount = 1;
        *out = s;
        return TL_OK;
    }
#endif
    /* malloc of the size plus the alignment, data aligned inside it: glibc's aligned_alloc would
       split the slack off its chunk and free it, and those small chunks, held in its per-thread
       cache and never merged, pin the big chunk: freed and asked again at the same size, a
       tensor then comes from new pages (16384 page faults for 64 MiB, every round of a loop) */
    const size_t rounded = (nbytes + TL_ALIGNMENT - 1) / TL_ALIGNMENT * TL_ALIGNMENT;
    s->block = malloc(rounded + TL_ALIGNMENT);
    s->data = s->block
                  ? (void *)(((uintptr_t)s->block + TL_ALIGNMENT - 1) / TL_ALIGNMENT * TL_ALIGNMENT)
                  : NULL;
    if (!s->data) {
        storage_free_header(s);
        return tl_error(TL_ERR_MEMORY, "empty: cannot allocate %zu bytes on the cpu", nbytes);
    }
    cpu_count_alloc(nbytes);
    s->nbytes = nbytes;
    s->device = device;
    s->refcount = 1;
    *out = s;
    return TL_OK;
}

tl_status tl_storage_new_pinned(size_t nbytes, tl_storage **out) {
#ifdef TLUA_HAVE_CUDA
    if (tl_cuda_device_count() == 0)
        return tl_error(TL_ERR_DEVICE,
                        "pin_memory: pinned host memory needs CUDA (no GPU is present: the "
                        "driver reports none)");
    /* pinned memory counts against the thread's budget as any tensor's */
    tl_storage *s = NULL;
    TL_TRY(new_header("pin_memory", nbytes, &s));
    tl_status status = tl_cuda_host_alloc(nbytes, "pin_memory", &s->data);
    if (status != TL_OK) {
        storage_free_header(s);
        return status;
    }
    cpu_count_alloc(nbytes);
    s->nbytes = nbytes;
    s->device = (tl_device){.type = TL_DEVICE_CPU, .index = 0};
    s->refcount = 1;
    s->pinned = true;
    *out = s;
    return TL_OK;
#else
    (void)nbytes, (void)out;
    return tl_error(TL_ERR_DEVICE,
                    "pin_memory: pinned host memory needs CUDA (this build has no CUDA support)");
#endif
}

void tl_storage_retain(tl_storage *s) {
    s->refcount++;
}

void tl_storage_release(tl_storage *s) {
    if (!s || --s->refcount > 0) return;
#ifdef TLUA_HAVE_CUDA
    if (s->device.type == TL_DEVICE_CUDA)
        tl_cuda_free(s->device.index, s->data);
    else
#endif
    {
        atomic_fetch_sub(&cpu_allocated, s->nbytes);
        atomic_fetch_add(&cpu_free_count, 1);
#ifdef TLUA_HAVE_CUDA
        if (s->pinned)
            tl_cuda_host_free(s->data);
        else
#endif
            free(s->block);
    }
    storage_free_header(s);
}

tl_status tl_memset_zero(tl_device device, void *dst, size_t n) {
#ifdef TLUA_HAVE_CUDA
    if (device.type == TL_DEVICE_CUDA) return tl_cuda_memset_zero(device.index, dst, n);
#else
    (void)device;
#endif
    if (n) memset(dst, 0, n);
    return TL_OK;
}

tl_status tl_memcpy(tl_device dst_device, void *dst, tl_device src_device, const void *src,
                    size_t n) {
    if (dst_device.type == TL_DEVICE_CPU && src_device.type == TL_DEVICE_CPU) {
        if (n) memmove(dst, src, n);
        return TL_OK;
    }
#ifdef TLUA_HAVE_CUDA
    return tl_cuda_memcpy(dst_device, dst, src_device, src, n);
#else
    return tl_error(TL_ERR_DEVICE, "copy: this build has no CUDA support");
#endif
}

tl_status tl_memcpy_constant(tl_device dst_device, void *dst, const void *src, size_t n) {
#ifdef TLUA_HAVE_CUDA
    if (dst_device.type == TL_DEVICE_CUDA && tl_cuda_capturing(dst_device.index)) {
        cudaStream_t stream;
        TL_TRY(tl_cuda_stream(dst_device.index, "copy", &stream));
        return tl_cuda_stage(dst_device.index, stream, dst, src, n, "copy", "host to device");
    }
#endif
    return tl_memcpy(dst_device, dst, TL_CPU, src, n);
}
