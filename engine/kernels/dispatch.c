/* Typed kernel lookup by (op, device, dtype), run counts and the kernel trace. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "tlua/trace.h"

typedef struct registered_kernel {
    const tl_kernel_entry *entry;
    tl_device_type device;
    uint64_t runs;
} registered_kernel;

static registered_kernel *kernels;
static int kernel_count;
/* index into kernels + 1, 0 when absent */
static int lookup[TL_OP_COUNT][TL_DEVICE_TYPE_COUNT][TL_DTYPE_COUNT];
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void build_registry(void) {
    int total = 0;
    for (int t = 0; t < tl_kernel_table_count; t++) total += tl_kernel_tables[t]->count;
    kernels = calloc((size_t)total, sizeof *kernels);
    if (!kernels) return; /* lookups then fail with a clear message */
    for (int t = 0; t < tl_kernel_table_count; t++) {
        const tl_kernel_table *table = tl_kernel_tables[t];
        for (int i = 0; i < table->count; i++) {
            const tl_kernel_entry *e = &table->entries[i];
            kernels[kernel_count] = (registered_kernel){.entry = e, .device = table->device};
            lookup[e->op][table->device][e->dtype] = ++kernel_count;
        }
    }
}

static registered_kernel *find(tl_op op, tl_device_type device, tl_dtype dtype) {
    pthread_once(&registry_once, build_registry);
    int index = lookup[op][device][dtype];
    return index ? &kernels[index - 1] : NULL;
}

bool tl_has_kernel(tl_op op, tl_device_type device, tl_dtype dtype) {
    return find(op, device, dtype) != NULL;
}

/* ---- trace ------------------------------------------------------------- */
static _Thread_local int trace_depth;
static _Thread_local tl_trace_event *trace_events;
static _Thread_local int trace_count, trace_capacity;
static _Thread_local bool trace_overflow;

void tl_trace_begin(void) {
    if (trace_depth++ == 0) {
        trace_count = 0;
        trace_overflow = false;
    }
}

tl_status tl_trace_end(tl_trace_event **events, int *count) {
    if (trace_depth == 0) return tl_error(TL_ERR_ARGUMENT, "trace: end without a begin");
    *count = trace_count;
    *events = NULL;
    if (trace_count > 0) {
        *events = malloc((size_t)trace_count * sizeof **events);
        if (!*events) return tl_error(TL_ERR_MEMORY, "trace: out of memory");
        memcpy(*events, trace_events, (size_t)trace_count * sizeof **events);
    }
    if (--trace_depth == 0) {
        free(trace_events);
        trace_events = NULL;
        trace_count = trace_capacity = 0;
    }
    if (trace_overflow) return tl_error(TL_ERR_MEMORY, "trace: out of memory recording events");
    return TL_OK;
}

static void record(registered_kernel *k, tl_device device, int count, const int *ndims,
                   const int64_t (*shapes)[TL_MAX_DIMS], const tl_tensor *const *tensors) {
    k->runs++;
    if (trace_depth == 0) return;
    if (trace_count == trace_capacity) {
        int capacity = trace_capacity ? trace_capacity * 2 : 64;
        tl_trace_event *grown = realloc(trace_events, (size_t)capacity * sizeof *grown);
        if (!grown) {
            trace_overflow = true;
            return;
        }
        trace_events = grown;
        trace_capacity = capacity;
    }
    tl_trace_event *e = &trace_events[trace_count++];
    memset(e, 0, sizeof *e);
    e->op = tl_op_info_of(k->entry->op)->name;
    e->kernel = k->entry->name;
    e->device = device;
    e->dtype = k->entry->dtype;
    for (int i = 0; i < count && i < TL_TRACE_MAX_TENSORS; i++) {
        if (tensors) {
            if (!tensors[i]) break;
            e->ndims[i] = tensors[i]->ndim;
            memcpy(e->shapes[i], tensors[i]->shape, sizeof e->shapes[i]);
        } else {
            e->ndims[i] = ndims[i];
            memcpy(e->shapes[i], shapes[i], sizeof e->shapes[i]);
        }
        e->ntensors = i + 1;
    }
}

static registered_kernel *find_or_fail(tl_op op, tl_device device, tl_dtype dtype) {
    registered_kernel *k = find(op, device.type, dtype);
    if (!k) {
        char name[16];
        tl_error(TL_ERR_DTYPE, "%s: no kernel for dtype %s on %s", tl_op_info_of(op)->name,
                 tl_dtype_name(dtype), tl_device_name(device, name));
    }
    return k;
}

const tl_kernel_entry *tl_dispatch(tl_op op, tl_device device, tl_dtype dtype,
                                   const tl_tensor *const *tensors) {
    registered_kernel *k = find_or_fail(op, device, dtype);
    if (!k) return NULL;
    record(k, device, TL_TRACE_MAX_TENSORS, NULL, NULL, tensors);
    return k->entry;
}

const tl_kernel_entry *tl_dispatch_shapes(tl_op op, tl_device device, tl_dtype dtype, int count,
                                          const int *ndims, const int64_t (*shapes)[TL_MAX_DIMS]) {
    registered_kernel *k = find_or_fail(op, device, dtype);
    if (!k) return NULL;
    record(k, device, count, ndims, shapes, NULL);
    return k->entry;
}

int tl_kernel_list(tl_kernel_info *out, int max) {
    pthread_once(&registry_once, build_registry);
    for (int i = 0; i < kernel_count && i < max; i++) {
        const tl_kernel_entry *e = kernels[i].entry;
        out[i] = (tl_kernel_info){.op = tl_op_info_of(e->op)->name,
                                  .kernel = e->name,
                                  .device = kernels[i].device,
                                  .dtype = e->dtype,
                                  .runs = kernels[i].runs};
    }
    return kernel_count;
}
