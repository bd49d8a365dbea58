/* A CUPTI kernel tracer to LD_PRELOAD into any CUDA program (tlua or python): per-kernel GPU time
 * and idle gaps. */
/*
 * Build:  cc -O2 -shared -fPIC -I/usr/local/cuda/include bench/kernel_trace.c -o kernel_trace.so \
 *             -L/usr/local/cuda/lib64 -lcupti
 * Run:    LD_PRELOAD=./kernel_trace.so KERNEL_TRACE_LAST_MS=200 tlua bench/gpt.lua --device cuda
 *
 * At exit it prints, for the last KERNEL_TRACE_LAST_MS milliseconds of GPU activity (default: the
 * last 40% of the span), the wall span, the time at least one kernel/copy ran (busy), the launch
 * count and a table of kernels by total time. Needs no profiler binary (the GPU machine has no
 * nsys).
 */
#define _GNU_SOURCE /* dladdr */
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct trace_record {
    uint64_t start, end;
    const char *name;
    int is_api; /* a runtime API call (host time) rather than GPU work */
} trace_record;

static trace_record *records;
static size_t n_records, cap_records;

static void push_record(uint64_t start, uint64_t end, const char *name, int is_api) {
    if (n_records == cap_records) {
        size_t cap = cap_records ? 2 * cap_records : 1 << 16;
        trace_record *grown = realloc(records, cap * sizeof *grown);
        if (!grown) return;
        records = grown;
        cap_records = cap;
    }
    records[n_records++] = (trace_record){start, end, name, is_api};
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *record = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)record;
            push_record(k->start, k->end, strdup(k->name), 0);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)record;
            push_record(m->start, m->end,
                        m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "[memcpy HtoD]"
                        : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "[memcpy DtoH]"
                                                                         : "[memcpy DtoD]",
                        0);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)record;
            push_record(m->start, m->end, "[memset]", 0);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)record;
            const char *name = NULL;
            cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
            push_record(a->start, a->end, name ? name : "?", 1);
        }
    }
    free(buffer);
}

static int by_start(const void *a, const void *b) {
    const trace_record *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct name_total {
    const char *name;
    uint64_t ns;
    size_t count;
} name_total;

static int by_total(const void *a, const void *b) {
    const name_total *x = a, *y = b;
    return x->ns > y->ns ? -1 : x->ns < y->ns;
}

static void record_total(name_total *totals, size_t *n_names, const trace_record *r) {
    size_t j = 0;
    while (j < *n_names && strcmp(totals[j].name, r->name) != 0) j++;
    if (j == *n_names) totals[(*n_names)++].name = r->name;
    totals[j].ns += r->end - r->start;
    totals[j].count++;
}

static void print_totals(const char *what, name_total *totals, size_t n_names) {
    qsort(totals, n_names, sizeof *totals, by_total);
    fprintf(stderr, "kernel_trace: %10s %8s %9s  %s\n", "total_ms", "count", "avg_us", what);
    for (size_t j = 0; j < n_names; j++)
        fprintf(stderr, "kernel_trace: %10.3f %8zu %9.2f  %.160s\n", totals[j].ns / 1e6,
                totals[j].count, totals[j].ns / 1e3 / (double)totals[j].count, totals[j].name);
}

static void report(void) {
    cuptiActivityFlushAll(1);
    if (n_records == 0) return;
    qsort(records, n_records, sizeof *records, by_start);
    uint64_t first = records[0].start, last = 0;
    for (size_t i = 0; i < n_records; i++)
        if (records[i].end > last) last = records[i].end;
    const char *window_env = getenv("KERNEL_TRACE_LAST_MS");
    uint64_t window = window_env ? (uint64_t)(atof(window_env) * 1e6) : (last - first) * 2 / 5;
    uint64_t from = last > window ? last - window : 0;
    name_total *totals = calloc(n_records, sizeof *totals),
               *api_totals = calloc(n_records, sizeof *totals);
    size_t n_names = 0, n_api = 0, launches = 0;
    uint64_t busy = 0, covered_to = from, span_start = UINT64_MAX;
    for (size_t i = 0; i < n_records; i++) {
        trace_record *r = &records[i];
        if (r->start < from) continue;
        if (r->is_api) {
            record_total(api_totals, &n_api, r);
            continue;
        }
        if (r->start < span_start) span_start = r->start;
        launches++;
        uint64_t s = r->start > covered_to ? r->start : covered_to;
        if (r->end > s) busy += r->end - s;
        if (r->end > covered_to) covered_to = r->end;
        record_total(totals, &n_names, r);
    }
    uint64_t span = last - span_start;
    fprintf(stderr, "kernel_trace: window %.3f ms, busy %.3f ms (%.1f%%), %zu launches\n",
            span / 1e6, busy / 1e6, 100.0 * (double)busy / (double)span, launches);
    print_totals("GPU work", totals, n_names);
    print_totals("runtime API call (host)", api_totals, n_api);
    free(totals);
    free(api_totals);
}

/* KERNEL_TRACE_SYNC_STACKS: the host call stacks that reach cudaStreamSynchronize, counted. */
#define STACK_DEPTH 12
typedef struct sync_stack {
    void *frames[STACK_DEPTH];
    int depth;
    size_t count;
} sync_stack;
static sync_stack stacks[256];
static size_t n_stacks;
/* the runtime call whose stacks are counted: cudaStreamSynchronize, or cudaFuncGetAttributes with
   KERNEL_TRACE_SYNC_STACKS=attributes (who asks for a kernel's attributes at every launch) */
static CUpti_CallbackId stack_cbid = CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020;

static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void *data) {
    (void)userdata;
    const CUpti_CallbackData *info = data;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || info->callbackSite != CUPTI_API_ENTER) return;
    if (cbid != stack_cbid) return;
    void *frames[STACK_DEPTH];
    int depth = backtrace(frames, STACK_DEPTH);
    for (size_t i = 0; i < n_stacks; i++)
        if (stacks[i].depth == depth &&
            memcmp(stacks[i].frames, frames, sizeof(void *) * (size_t)depth) == 0) {
            stacks[i].count++;
            return;
        }
    if (n_stacks == sizeof stacks / sizeof stacks[0]) return;
    memcpy(stacks[n_stacks].frames, frames, sizeof frames);
    stacks[n_stacks].depth = depth;
    stacks[n_stacks++].count = 1;
}

static void report_stacks(void) {
    for (size_t i = 0; i < n_stacks; i++) {
        fprintf(stderr, "kernel_trace: sync stack x%zu:", stacks[i].count);
        char **names = backtrace_symbols(stacks[i].frames, stacks[i].depth);
        for (int f = 2; f < stacks[i].depth && names; f++) {
            const char *open = strchr(names[f], '('), *plus = open ? strchr(open, '+') : NULL;
            Dl_info where;
            if (open && plus && plus > open + 1)
                fprintf(stderr, " %.*s", (int)(plus - open - 1), open + 1);
            else if (dladdr(stacks[i].frames[f], &where) && where.dli_fname) {
                /* no symbol: the library and the offset in it */
                const char *base = strrchr(where.dli_fname, '/');
                fprintf(stderr, " %s+%#lx", base ? base + 1 : where.dli_fname,
                        (unsigned long)((char *)stacks[i].frames[f] - (char *)where.dli_fbase));
            } else
                fprintf(stderr, " ?");
        }
        fprintf(stderr, "\n");
        free(names);
    }
}

__attribute__((constructor)) static void start_trace(void) {
    if (getenv("KERNEL_TRACE_SYNC_STACKS")) {
        if (strcmp(getenv("KERNEL_TRACE_SYNC_STACKS"), "attributes") == 0)
            stack_cbid = CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020;
        CUpti_SubscriberHandle subscriber;
        cuptiSubscribe(&subscriber, on_api, NULL);
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
        atexit(report_stacks);
    }
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    if (getenv("KERNEL_TRACE_API")) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
    atexit(report);
}
