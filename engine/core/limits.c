/* Limits of the calling thread: a memory budget charged by new tensor storages, and a deadline
   checked before every kernel. */
#include <stdatomic.h>
#include <stdlib.h>

#include "tlua/runtime.h"

struct tl_memory_budget {
    _Atomic size_t used;
    _Atomic uint64_t refusals;
    size_t limit; /* 0: none */
    _Atomic int refcount;
};

static _Thread_local tl_memory_budget *thread_budget;
static _Thread_local double thread_deadline;
static _Thread_local uint64_t thread_limit_ms;

tl_status tl_memory_budget_new(size_t limit, tl_memory_budget **out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "tl_memory_budget_new: out is NULL");
    tl_memory_budget *b = calloc(1, sizeof *b);
    if (!b) return tl_error(TL_ERR_MEMORY, "tl_memory_budget_new: out of memory");
    b->limit = limit;
    atomic_init(&b->used, 0);
    atomic_init(&b->refusals, 0);
    atomic_init(&b->refcount, 1);
    *out = b;
    return TL_OK;
}

void tl_memory_budget_retain(tl_memory_budget *budget) {
    if (budget) atomic_fetch_add(&budget->refcount, 1);
}

void tl_memory_budget_release(tl_memory_budget *budget) {
    if (budget && atomic_fetch_sub(&budget->refcount, 1) == 1) free(budget);
}

/* used + n <= limit, taken atomically: several threads may free or charge at once */
bool tl_memory_budget_charge(tl_memory_budget *budget, size_t n) {
    size_t used = atomic_load(&budget->used);
    for (;;) {
        if (budget->limit && (n > budget->limit || used > budget->limit - n)) {
            atomic_fetch_add(&budget->refusals, 1);
            return false;
        }
        if (atomic_compare_exchange_weak(&budget->used, &used, used + n)) return true;
    }
}

void tl_memory_budget_uncharge(tl_memory_budget *budget, size_t n) {
    atomic_fetch_sub(&budget->used, n);
}

size_t tl_memory_budget_used(const tl_memory_budget *budget) {
    return atomic_load(&((tl_memory_budget *)budget)->used);
}

uint64_t tl_memory_budget_refusals(const tl_memory_budget *budget) {
    return atomic_load(&((tl_memory_budget *)budget)->refusals);
}

size_t tl_memory_budget_limit(const tl_memory_budget *budget) {
    return budget->limit;
}

tl_memory_budget *tl_set_thread_memory_budget(tl_memory_budget *budget) {
    tl_memory_budget *previous = thread_budget;
    thread_budget = budget;
    return previous;
}

tl_memory_budget *tl_thread_memory_budget(void) {
    return thread_budget;
}

double tl_set_thread_deadline(double deadline, uint64_t limit_ms) {
    double previous = thread_deadline;
    thread_deadline = deadline;
    thread_limit_ms = limit_ms;
    return previous;
}

tl_status tl_check_deadline(const char *op) {
    if (thread_deadline <= 0 || tl_clock() < thread_deadline) return TL_OK;
    return tl_error(TL_ERR_RUNTIME, "%s: the time limit of %llu ms is exceeded", op,
                    (unsigned long long)thread_limit_ms);
}
