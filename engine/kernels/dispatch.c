/* Typed kernel lookup by (op, device, dtype), run counts and the kernel trace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "tlua/runtime.h"
#include "tlua/trace.h"

/* A registered kernel: one (op, device, dtype) of a table entry, with its own name. */
typedef struct registered_kernel {
    tl_kernel_entry entry; /* the table's, with dtype and name set */
    tl_device_type device;
    uint64_t runs;
    char name[64];
} registered_kernel;

/* A registered variant: one (variant, dtype) of a table's list, with the kernel it belongs to
   (NULL for a loop's) and the name tl.trace shows ("loop.name" for a loop's). */
typedef struct registered_variant {
    const tl_kernel_variant *variant;
    const registered_kernel *kernel;
    tl_device_type device;
    tl_dtype dtype;
    uint64_t runs;
    char label[48];
} registered_variant;

/* A variant table's list and where its (variant, dtype) pairs are registered: slot[i * dtypes +
   d] is the index into variants + 1 (0 when not registered), so a report costs a table scan of
   a few entries and one lookup. */
typedef struct variant_list {
    const tl_kernel_variant *first;
    int count;
    int *slot;
} variant_list;

typedef struct registry {
    registered_kernel *kernels;
    int count;
    registered_variant *variants;
    int variant_count;
    variant_list *lists;
    int list_count;
    uint64_t generation; /* which build: a registry at a freed one's address is another */
    /* index into kernels + 1, 0 when absent */
    int lookup[TL_OP_COUNT][TL_DEVICE_TYPE_COUNT][TL_DTYPE_COUNT];
    char problem[256]; /* the first bad entry, "" when the tables are sound */
} registry;

static registry *current;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* Each family's kernel signature (its FAMILY row in ops.def): the union member its entries fill. */
tl_kernel_signature tl_family_signature(tl_op_family family) {
    static const tl_kernel_signature signatures[TL_FAMILY_COUNT] = {
#define FAMILY(name, signature) [TL_FAMILY_##name] = TL_SIG_##signature,
#include "tlua/ops.def"
#undef FAMILY
    };
    return (unsigned)family < TL_FAMILY_COUNT ? signatures[family] : TL_SIG_none;
}

const char *tl_signature_name(tl_kernel_signature signature) {
    static const char *const names[] = {
#define TL_SIGNATURE_NAME(member, type) [TL_SIG_##member] = #member,
        TL_KERNEL_SIGNATURES(TL_SIGNATURE_NAME)
#undef TL_SIGNATURE_NAME
    };
    if (signature == TL_SIG_none) return "none";
    return (unsigned)signature < sizeof names / sizeof names[0] ? names[signature] : "unknown";
}

/* dtype suffixes of kernel names */
static const char *const dtype_suffix[TL_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16",
                                                         "i32", "i64", "bool"};
_Static_assert(TL_F32 == 0 && TL_F64 == 1 && TL_BF16 == 2 && TL_F16 == 3 && TL_I32 == 4 &&
                   TL_I64 == 5 && TL_BOOL == 6 && TL_DTYPE_COUNT == 7,
               "dtype_suffix follows tl_dtype");

static int popcount(uint32_t v) {
    int n = 0;
    for (; v; v &= v - 1) n++;
    return n;
}

/* Records the first problem of r's tables; later ones are dropped. */
static void reject(registry *r, const char *fmt, const char *name, const char *detail) {
    if (!r->problem[0]) snprintf(r->problem, sizeof r->problem, fmt, name, detail);
}

static void register_variants(registry *r, const tl_variant_table *table);

static registry *registry_build(const tl_kernel_table *const *tables, int table_count,
                                const tl_variant_table *const *variant_tables,
                                int variant_table_count) {
    static uint64_t builds;
    registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->generation = ++builds;
    int total = 0, variants = 0;
    for (int t = 0; t < table_count; t++)
        for (int i = 0; i < tables[t]->count; i++)
            total += popcount(tables[t]->entries[i].dtypes & TL_DTYPES_ALL);
    for (int t = 0; t < variant_table_count; t++)
        for (int i = 0; i < variant_tables[t]->count; i++)
            variants += popcount(variant_tables[t]->variants[i].dtypes & TL_DTYPES_ALL);
    r->kernels = calloc((size_t)(total > 0 ? total : 1), sizeof *r->kernels);
    r->variants = calloc((size_t)(variants > 0 ? variants : 1), sizeof *r->variants);
    r->lists =
        calloc((size_t)(variant_table_count > 0 ? variant_table_count : 1), sizeof *r->lists);
    if (!r->kernels || !r->variants || !r->lists) {
        snprintf(r->problem, sizeof r->problem, "out of memory registering %d kernels", total);
        return r;
    }
    for (int t = 0; t < table_count; t++) {
        const tl_kernel_table *table = tables[t];
        const char *device = table->device == TL_DEVICE_CPU ? "cpu" : "cuda";
        for (int i = 0; i < table->count; i++) {
            const tl_kernel_entry *e = &table->entries[i];
            char base[48];
            if ((unsigned)e->op >= TL_OP_COUNT) {
                snprintf(base, sizeof base, "#%d of a %s table", i + 1, device);
                reject(r, "kernel entry %s: no such op%s", base, "");
                continue;
            }
            const tl_op_info *info = tl_op_info_of(e->op);
            if (e->name)
                snprintf(base, sizeof base, "%s", e->name);
            else
                snprintf(base, sizeof base, "%s_%s", device, info->name);
            tl_kernel_signature want = tl_family_signature(info->family);
            if (e->signature != want) {
                char detail[96];
                snprintf(detail, sizeof detail, "a %s kernel, but op %s (family %s) takes %s",
                         tl_signature_name(e->signature), info->name, info->family_name,
                         tl_signature_name(want));
                reject(r, "kernel entry %s: %s", base, detail);
                continue;
            }
            if ((e->dtypes & TL_DTYPES_ALL) == 0 || (e->dtypes & ~(uint32_t)TL_DTYPES_ALL))
                reject(r, "kernel entry %s: %s", base, "a dtype set without a known dtype");
            for (int d = 0; d < TL_DTYPE_COUNT; d++) {
                if (!(e->dtypes & (1u << d))) continue;
                int *slot = &r->lookup[e->op][table->device][d];
                registered_kernel *k = &r->kernels[r->count];
                snprintf(k->name, sizeof k->name, "%s_%s", base, dtype_suffix[d]);
                if (*slot) {
                    reject(r, "kernel entry %s: %s", k->name,
                           "a second kernel for this (op, device, dtype)");
                    continue;
                }
                k->entry = *e;
                k->entry.dtype = (tl_dtype)d;
                k->entry.name = k->name;
                k->device = table->device;
                *slot = ++r->count;
            }
        }
    }
    for (int t = 0; t < variant_table_count; t++) register_variants(r, variant_tables[t]);
    return r;
}

/* Registers a file's variants (after every kernel): each dtype of an op's variant needs a kernel
   of that (op, device, dtype); a loop's belongs to no kernel. */
static void register_variants(registry *r, const tl_variant_table *table) {
    variant_list *list = &r->lists[r->list_count];
    list->slot =
        calloc((size_t)(table->count > 0 ? table->count : 1) * TL_DTYPE_COUNT, sizeof *list->slot);
    if (!list->slot) {
        reject(r, "kernel variants %s: %s", "of a table", "out of memory");
        return;
    }
    list->first = table->variants;
    list->count = table->count;
    r->list_count++;
    for (int i = 0; i < table->count; i++) {
        const tl_kernel_variant *v = &table->variants[i];
        const char *name = v->name ? v->name : "(unnamed)";
        if ((!v->loop && (unsigned)v->op >= TL_OP_COUNT) || !v->name || !v->condition ||
            (v->dtypes & TL_DTYPES_ALL) == 0) {
            reject(r, "kernel variant %s: %s", name, "no op or loop, name, condition or dtype");
            continue;
        }
        for (int d = 0; d < TL_DTYPE_COUNT; d++) {
            if (!(v->dtypes & (1u << d))) continue;
            int index = v->loop ? 0 : r->lookup[v->op][table->device][d];
            if (!v->loop && !index) {
                reject(r, "kernel variant %s: %s", name, "a dtype its op has no kernel for");
                continue;
            }
            registered_variant *rv = &r->variants[r->variant_count];
            *rv = (registered_variant){.variant = v,
                                       .kernel = index ? &r->kernels[index - 1] : NULL,
                                       .device = table->device,
                                       .dtype = (tl_dtype)d};
            if (v->loop)
                snprintf(rv->label, sizeof rv->label, "%s.%s", v->loop, v->name);
            else
                snprintf(rv->label, sizeof rv->label, "%s", v->name);
            list->slot[i * TL_DTYPE_COUNT + d] = ++r->variant_count;
        }
    }
}

static void registry_free(registry *r) {
    if (r) {
        free(r->kernels);
        free(r->variants);
        for (int i = 0; i < r->list_count; i++) free(r->lists[i].slot);
        free(r->lists);
    }
    free(r);
}

static void build_registry(void) {
    __atomic_store_n(&current,
                     registry_build(tl_kernel_tables, tl_kernel_table_count, tl_variant_tables,
                                    tl_variant_table_count),
                     __ATOMIC_RELEASE);
}

static registry *get_registry(void) {
    pthread_once(&registry_once, build_registry);
    return current;
}

void tl_registry_use_tables(const tl_kernel_table *const *tables, int count) {
    registry *old = get_registry();
    registry *built = tables ? registry_build(tables, count, NULL, 0)
                             : registry_build(tl_kernel_tables, tl_kernel_table_count,
                                              tl_variant_tables, tl_variant_table_count);
    __atomic_store_n(&current, built, __ATOMIC_RELEASE);
    registry_free(old);
}

const char *tl_registry_problem(void) {
    registry *r = get_registry();
    return !r ? "out of memory building the kernel registry" : r->problem[0] ? r->problem : NULL;
}

static registered_kernel *find(tl_op op, tl_device_type device, tl_dtype dtype) {
    registry *r = get_registry();
    if (!r || r->problem[0]) return NULL;
    int index = r->lookup[op][device][dtype];
    return index ? &r->kernels[index - 1] : NULL;
}

bool tl_has_kernel(tl_op op, tl_device_type device, tl_dtype dtype) {
    return find(op, device, dtype) != NULL;
}

/* ---- trace ------------------------------------------------------------- */
/* One record per thread; each open begin keeps where its events start and whether a run was
   lost while it was open. A begin nested deeper than TRACE_MAX_LEVELS records nothing of its
   own: its end is an error (the outer ones still get their runs). */
#define TRACE_MAX_LEVELS 64
static _Thread_local int trace_depth;
static _Thread_local tl_trace_event *trace_events;
static _Thread_local int trace_count, trace_capacity;
static _Thread_local int trace_start[TRACE_MAX_LEVELS];
static _Thread_local bool trace_lost[TRACE_MAX_LEVELS];

void tl_trace_begin(void) {
    if (trace_depth == 0) trace_count = 0;
    if (trace_depth < TRACE_MAX_LEVELS) {
        trace_start[trace_depth] = trace_count;
        trace_lost[trace_depth] = false;
    }
    trace_depth++;
}

tl_status tl_trace_end(tl_trace_event **events, int *count) {
    if (events) *events = NULL;
    if (count) *count = 0;
    if (trace_depth == 0) return tl_error(TL_ERR_ARGUMENT, "trace: end without a begin");
    int level = trace_depth - 1;
    int n = level < TRACE_MAX_LEVELS ? trace_count - trace_start[level] : 0;
    tl_status status = TL_OK;
    if (!events || !count) {
        status = tl_error(TL_ERR_ARGUMENT, "trace: end with %s NULL", events ? "count" : "events");
    } else if (level >= TRACE_MAX_LEVELS) {
        status =
            tl_error(TL_ERR_ARGUMENT, "trace: begins nested more than %d deep", TRACE_MAX_LEVELS);
    } else if (trace_lost[level]) {
        status = tl_error(TL_ERR_MEMORY, "trace: out of memory recording events");
    } else if (n > 0) {
        *events = malloc((size_t)n * sizeof **events);
        if (*events) {
            memcpy(*events, trace_events + trace_start[level], (size_t)n * sizeof **events);
            *count = n;
        } else {
            status = tl_error(TL_ERR_MEMORY, "trace: out of memory");
        }
    }
    if (--trace_depth == 0) { /* the begin is ended, also on error */
        free(trace_events);
        trace_events = NULL;
        trace_count = trace_capacity = 0;
    }
    return status;
}

/* the dtype of the kernel dispatched last on this thread (-1 before any): a loop variant counts
   for it */
static _Thread_local int last_dtype = -1;

static void record(registered_kernel *k, tl_device device, int count, const int *ndims,
                   const int64_t (*shapes)[TL_MAX_DIMS], const tl_tensor *const *tensors) {
    k->runs++;
    last_dtype = (int)k->entry.dtype;
    if (trace_depth == 0) return;
    if (trace_count == trace_capacity) {
        int capacity = trace_capacity ? trace_capacity * 2 : 64;
        tl_trace_event *grown = realloc(trace_events, (size_t)capacity * sizeof *grown);
        if (!grown) { /* every open begin has lost this run */
            for (int i = 0; i < trace_depth && i < TRACE_MAX_LEVELS; i++) trace_lost[i] = true;
            return;
        }
        trace_events = grown;
        trace_capacity = capacity;
    }
    tl_trace_event *e = &trace_events[trace_count++];
    memset(e, 0, sizeof *e);
    e->op = tl_op_info_of(k->entry.op)->name;
    e->kernel = k->entry.name;
    e->device = device;
    e->dtype = k->entry.dtype;
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

static _Thread_local tl_status dispatch_status = TL_ERR_DTYPE;

tl_status tl_dispatch_status(void) {
    return dispatch_status;
}

static registered_kernel *find_or_fail(tl_op op, tl_device device, tl_dtype dtype) {
    /* no kernel starts after the calling thread's deadline (the embedding's time limit) */
    if ((dispatch_status = tl_check_deadline(tl_op_info_of(op)->name)) != TL_OK) return NULL;
    registered_kernel *k = find(op, device.type, dtype);
    const char *problem = k ? NULL : tl_registry_problem();
    if (problem) {
        dispatch_status = tl_error(TL_ERR_RUNTIME, "%s: the kernel registry is broken: %s",
                                   tl_op_info_of(op)->name, problem);
        return NULL;
    }
    if (!k) {
        char name[16];
        dispatch_status =
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
    return &k->entry;
}

const tl_kernel_entry *tl_dispatch_shapes(tl_op op, tl_device device, tl_dtype dtype, int count,
                                          const int *ndims, const int64_t (*shapes)[TL_MAX_DIMS]) {
    registered_kernel *k = find_or_fail(op, device, dtype);
    if (!k) return NULL;
    record(k, device, count, ndims, shapes, NULL);
    return &k->entry;
}

/* The thread's last lookup: a loop reports the same path run after run (a small op's walk), so
   a report costs one comparison then. */
static _Thread_local struct {
    const registry *r;
    uint64_t generation;
    const tl_kernel_variant *variant;
    tl_dtype dtype;
    registered_variant *found;
} last_lookup;

/* The registered (variant, dtype), or NULL. */
static registered_variant *find_variant(const tl_kernel_variant *variant, tl_dtype dtype) {
    /* built once a kernel was dispatched: no pthread_once on the way of a repeated report */
    registry *r = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
    if (r && last_lookup.r == r && last_lookup.generation == r->generation &&
        last_lookup.variant == variant && last_lookup.dtype == dtype)
        return last_lookup.found;
    r = get_registry();
    if (!r || !variant || (unsigned)dtype >= TL_DTYPE_COUNT) return NULL;
    for (int l = 0; l < r->list_count; l++) {
        const variant_list *list = &r->lists[l];
        if (variant < list->first || variant >= list->first + list->count) continue;
        int index = list->slot[(variant - list->first) * TL_DTYPE_COUNT + dtype];
        registered_variant *found = index ? &r->variants[index - 1] : NULL;
        last_lookup.r = r, last_lookup.generation = r->generation;
        last_lookup.variant = variant, last_lookup.dtype = dtype;
        last_lookup.found = found;
        return found;
    }
    return NULL;
}

/* Counts a run of v and adds its label to the trace's last event (when that event is v's
   kernel's, or any kernel's for a loop's), once. */
static void variant_record(registered_variant *v) {
    v->runs++;
    if (trace_depth == 0 || trace_count == 0) return;
    tl_trace_event *e = &trace_events[trace_count - 1];
    if (v->kernel && e->kernel != v->kernel->name) return;
    for (int i = 0; i < e->nvariants; i++)
        if (e->variants[i] == v->label) return;
    if (e->nvariants < TL_TRACE_MAX_VARIANTS) e->variants[e->nvariants++] = v->label;
}

void tl_variant_ran(const tl_kernel_variant *variant, tl_dtype dtype) {
    registered_variant *v = find_variant(variant, dtype);
    if (v) variant_record(v);
}

void tl_loop_variant_ran(const tl_kernel_variant *variant) {
    if (last_dtype < 0) return;
    registered_variant *v = find_variant(variant, (tl_dtype)last_dtype);
    if (v) variant_record(v);
}

int tl_kernel_variant_list(tl_kernel_variant_info *out, int max) {
    registry *r = get_registry();
    if (!r) return 0;
    for (int i = 0; i < r->variant_count && i < max; i++) {
        const registered_variant *v = &r->variants[i];
        out[i] =
            (tl_kernel_variant_info){.op = v->kernel ? tl_op_info_of(v->variant->op)->name : NULL,
                                     .kernel = v->kernel ? v->kernel->name : NULL,
                                     .loop = v->variant->loop,
                                     .variant = v->variant->name,
                                     .condition = v->variant->condition,
                                     .device = v->device,
                                     .dtype = v->dtype,
                                     .runs = v->runs};
    }
    return r->variant_count;
}

int tl_kernel_list(tl_kernel_info *out, int max) {
    registry *r = get_registry();
    if (!r) return 0;
    for (int i = 0; i < r->count && i < max; i++) {
        const tl_kernel_entry *e = &r->kernels[i].entry;
        out[i] = (tl_kernel_info){.op = tl_op_info_of(e->op)->name,
                                  .kernel = e->name,
                                  .device = r->kernels[i].device,
                                  .dtype = e->dtype,
                                  .runs = r->kernels[i].runs};
    }
    return r->count;
}
