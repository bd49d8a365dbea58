/* Process-wide settings (threads, the clock, random seeds) and the calling thread's limits. */
#ifndef TLUA_RUNTIME_H
#define TLUA_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads used by OpenBLAS and the engine's own CPU loops (OpenMP). */
tl_status tl_set_num_threads(int n);
int tl_get_num_threads(void);

/* Monotonic wall time in seconds (CLOCK_MONOTONIC, nanosecond resolution). */
double tl_clock(void);

/* Seeds the global generator used by rand, randn, randint, randperm (and the kernels that draw
   inside themselves: dropout, attention's dropout). */
void tl_manual_seed(uint64_t seed);

/* The global generator's whole state: its seed and the next unused Philox block. Setting a
   state got earlier replays the same numbers from there (both devices draw from it). */
typedef struct tl_rng_state {
    uint64_t seed;
    uint64_t counter;
} tl_rng_state;
void tl_get_rng_state(tl_rng_state *out);
void tl_set_rng_state(tl_rng_state state);

/* ---- limits of the calling thread (the embedding library's sandbox sets them) ----------------
   A memory budget: a byte count that new tensor storages (CPU and CUDA) are charged to while it
   is the calling thread's budget, and that they give back when freed (whatever thread frees
   them, whenever: a storage keeps a reference to its budget). A storage that would take the
   budget past its limit is refused (TL_ERR_MEMORY, "memory limit of N bytes exceeded").
   Reference counted and thread-safe. Other users (the Lua heap) charge it by hand. */
typedef struct tl_memory_budget tl_memory_budget;
/* A new budget of limit bytes (0: no limit, counting only), one reference. */
tl_status tl_memory_budget_new(size_t limit, tl_memory_budget **out);
void tl_memory_budget_retain(tl_memory_budget *budget);
void tl_memory_budget_release(tl_memory_budget *budget); /* NULL is fine */
/* Takes n bytes from the budget: false (nothing taken) when that would pass the limit. */
bool tl_memory_budget_charge(tl_memory_budget *budget, size_t n);
/* Gives n bytes back. */
void tl_memory_budget_uncharge(tl_memory_budget *budget, size_t n);
/* Bytes charged now, and the limit. */
size_t tl_memory_budget_used(const tl_memory_budget *budget);
size_t tl_memory_budget_limit(const tl_memory_budget *budget);
/* How many charges the budget refused so far. */
uint64_t tl_memory_budget_refusals(const tl_memory_budget *budget);
/* Makes budget (NULL: none) the calling thread's; returns the previous one (the caller keeps its
   reference: the thread holds none). */
tl_memory_budget *tl_set_thread_memory_budget(tl_memory_budget *budget);
tl_memory_budget *tl_thread_memory_budget(void);

/* A deadline of the calling thread, in tl_clock() seconds (0: none): once it has passed, every op
   fails before it starts a kernel (TL_ERR_RUNTIME, "<op>: the time limit of <limit> ms is
   exceeded"); limit_ms is only for that message. A kernel that started runs to its end. Returns
   the previous deadline. */
double tl_set_thread_deadline(double deadline, uint64_t limit_ms);
/* TL_OK, or the error above for op when the calling thread's deadline has passed. */
tl_status tl_check_deadline(const char *op);

/* float32 matrix products on CUDA: "highest" (the default) computes in full float32;
   "high" lets cuBLAS use TF32 tensor cores (10-bit mantissa products, float32
   accumulation). Other dtypes and the CPU are not affected. */
tl_status tl_set_matmul_precision(const char *precision);
/* "highest" or "high". */
const char *tl_get_matmul_precision(void);
/* Whether conv2d (and conv_transpose2d) run on cuDNN on a CUDA device where the build has it
   (the default), or by im2col and cuBLAS as on the CPU, and scaled_dot_product_attention on
   cuDNN's fused attention where it takes the problem (bfloat16/float16, no dropout, head dims a
   multiple of 8 up to 128) or on tlua's own kernels: for comparing the two, as
   torch.backends.cudnn.enabled. */
void tl_set_cudnn_enabled(bool enabled);
bool tl_cudnn_enabled(void);
/* Whether grouped_mm and its gradients (bfloat16/float16) run on tlua's Hopper GEMM core on a
   Hopper GPU where the build has it (the default: their tiles are found on the device, so device
   offsets need no host wait), or on cuBLAS with the offsets read on the host: for comparing the
   two. */
void tl_set_hopper_gemm_enabled(bool enabled);
bool tl_hopper_gemm_enabled(void);

/* What the CPU storage allocator holds: bytes of the live tensors' storages
   (as requested, before alignment), their highest value since the last reset,
   and the counts of storages made and freed. */
typedef struct tl_cpu_memory_stats {
    uint64_t allocated_bytes;
    uint64_t peak_allocated_bytes;
    uint64_t active_blocks;
    uint64_t alloc_count;
    uint64_t free_count;
} tl_cpu_memory_stats;

void tl_cpu_get_memory_stats(tl_cpu_memory_stats *out);
/* The peak restarts from the current allocated_bytes. */
void tl_cpu_reset_peak_memory_stats(void);

#ifdef __cplusplus
}
#endif

#endif
