/* A sampling profiler of host time to LD_PRELOAD into any program (tlua or python): where the CPU
 * time of the process goes, by function, for machines without perf. */
/*
 * Build:  CMake builds host_profile.so in the build folder; or by hand:
 *         cc -O2 -shared -fPIC bench/host_profile.c -o host_profile.so -ldl
 * Run:    LD_PRELOAD=./host_profile.so HOST_PROFILE_HZ=2000 tlua bench/resnet.lua --device cuda
 *
 * A SIGPROF timer (CPU time of the process) samples the stack of the thread it interrupts; at
 * exit the profiler prints the functions by self samples (the frame that was running) and by
 * inclusive samples (anywhere on the stack, counted once per sample), with the library each one
 * lives in. Functions without a dynamic symbol show as library+offset.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

enum { DEPTH = 48, MAX_SAMPLES = 1 << 18, SKIPPED = 2 /* the handler and the signal frame */ };

typedef struct sample {
    int depth;
    void *frames[DEPTH];
} sample;

static sample *samples;
static volatile sig_atomic_t n_samples;

static void on_tick(int signo) {
    (void)signo;
    int i = n_samples;
    if (i >= MAX_SAMPLES) return;
    n_samples = i + 1;
    samples[i].depth = backtrace(samples[i].frames, DEPTH);
}

/* A frame's name: its symbol, or its library and offset. */
static void name_of(void *address, char *out, size_t size) {
    Dl_info info;
    if (dladdr(address, &info) && info.dli_fname) {
        const char *lib = strrchr(info.dli_fname, '/');
        lib = lib ? lib + 1 : info.dli_fname;
        if (info.dli_sname)
            snprintf(out, size, "%s  [%s]", info.dli_sname, lib);
        else
            snprintf(out, size, "%s+0x%lx", lib,
                     (unsigned long)((char *)address - (char *)info.dli_fbase));
    } else {
        snprintf(out, size, "%p", address);
    }
}

typedef struct entry {
    char name[256];
    long self, inclusive;
    int last_sample; /* counts a function once per sample */
} entry;

static entry *entries;
static int n_entries, cap_entries;

static entry *find(const char *name) {
    for (int i = 0; i < n_entries; i++)
        if (strcmp(entries[i].name, name) == 0) return &entries[i];
    if (n_entries == cap_entries) {
        int cap = cap_entries ? 2 * cap_entries : 1024;
        entry *grown = realloc(entries, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        entries = grown, cap_entries = cap;
    }
    entry *e = &entries[n_entries++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->self = e->inclusive = 0;
    e->last_sample = -1;
    return e;
}

static int by_self(const void *a, const void *b) {
    long d = ((const entry *)b)->self - ((const entry *)a)->self;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static int by_inclusive(const void *a, const void *b) {
    long d = ((const entry *)b)->inclusive - ((const entry *)a)->inclusive;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static void report(void) {
    struct itimerval off = {0};
    setitimer(ITIMER_PROF, &off, NULL);
    int n = n_samples;
    if (n == 0) return;
    for (int s = 0; s < n; s++) {
        for (int f = SKIPPED; f < samples[s].depth; f++) {
            char name[256];
            name_of(samples[s].frames[f], name, sizeof name);
            entry *e = find(name);
            if (!e) continue;
            if (f == SKIPPED) e->self++;
            if (e->last_sample != s) e->inclusive++, e->last_sample = s;
        }
    }
    const char *rows_env = getenv("HOST_PROFILE_ROWS");
    int rows = rows_env ? atoi(rows_env) : 40;
    fprintf(stderr, "host_profile: %d samples\nhost_profile:   self%%  function (self)\n", n);
    qsort(entries, (size_t)n_entries, sizeof *entries, by_self);
    for (int i = 0; i < n_entries && i < rows; i++)
        fprintf(stderr, "host_profile: %6.2f  %s\n", 100.0 * (double)entries[i].self / n,
                entries[i].name);
    fprintf(stderr, "host_profile:   incl%%  function (inclusive)\n");
    qsort(entries, (size_t)n_entries, sizeof *entries, by_inclusive);
    for (int i = 0; i < n_entries && i < rows; i++)
        fprintf(stderr, "host_profile: %6.2f  %s\n", 100.0 * (double)entries[i].inclusive / n,
                entries[i].name);
}

__attribute__((constructor)) static void start(void) {
    samples = calloc(MAX_SAMPLES, sizeof *samples);
    if (!samples) return;
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder outside the signal handler */
    const char *hz_env = getenv("HOST_PROFILE_HZ");
    long hz = hz_env ? atol(hz_env) : 1000;
    if (hz <= 0 || hz > 100000) hz = 1000;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_tick;
    action.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &action, NULL);
    struct itimerval every = {{0, 1000000 / hz}, {0, 1000000 / hz}};
    setitimer(ITIMER_PROF, &every, NULL);
    atexit(report);
}
