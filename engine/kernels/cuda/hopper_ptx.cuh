/* The Hopper (sm_90a) instructions the GEMM core is made of, one inline-PTX function each:
   mbarriers, TMA tile copies and tensor-map edits, wgmma's fences and shared-memory descriptors. */
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ uint32_t tl_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarriers: a phase completes when `count` arrivals and the expected transaction bytes
   (what TMA copies deliver) have all come in; waiters name the phase by its parity ---------- */
__device__ __forceinline__ void tl_mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(tl_smem_addr(bar)), "r"(count));
}
/* one arrival plus "expect bytes more transaction bytes" */
__device__ __forceinline__ void tl_mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(tl_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void tl_mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(tl_smem_addr(bar)) : "memory");
}
/* Spins until the phase of the given parity has completed. A fresh barrier is in phase 0, so
   waiting for parity 1 returns at once (the phase "before" counts as complete): that is how a
   producer's first pass over an empty ring goes through. */
__device__ __forceinline__ void tl_mbar_wait(uint64_t *bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(tl_smem_addr(bar)), "r"(parity)
                     : "memory");
    }
}

/* ---- a kernel's shared memory: a ring of stages (A, then B, tiles of 16-bit elements), the
   consumers' staging of their results, then the ring's full and empty barriers ------------------
 */
struct tl_hopper_smem {
    uint16_t *a, *b, *staging;
    uint64_t *full, *empty;
};
/* 128B swizzle repeats every 8 rows of 128 bytes: the tiles start on 1024-byte boundaries (the
   dynamic shared memory asked for has 1024 bytes more). Elements: a_stage and b_stage a stage,
   staging in all. */
__device__ __forceinline__ tl_hopper_smem tl_hopper_carve(uint8_t *raw, int stages, int a_stage,
                                                          int b_stage, int staging) {
    uint8_t *base = (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    tl_hopper_smem m;
    m.a = (uint16_t *)base;
    m.b = m.a + stages * a_stage;
    m.staging = m.b + stages * b_stage;
    m.full = (uint64_t *)(m.staging + staging);
    m.empty = m.full + stages;
    return m;
}
/* Thread 0: a stage is full on the producer's one arrival (with its bytes), empty on one arrival
   of each consumer warp. */
__device__ __forceinline__ void tl_hopper_ring_init(const tl_hopper_smem &m, int stages,
                                                    int consumer_warps) {
    for (int s = 0; s < stages; s++) {
        tl_mbar_init(&m.full[s], 1);
        tl_mbar_init(&m.empty[s], consumer_warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* ---- flags in global memory between the CTAs of a grid that are all resident at once ------ */
/* counter += 1, after (release) this thread's earlier memory operations */
__device__ __forceinline__ void tl_flag_add(unsigned *counter) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
}
/* counter's value, before (acquire) this thread's later memory operations; then the async
   proxy's (TMA's) later global accesses too */
__device__ __forceinline__ unsigned tl_flag_read(const unsigned *counter) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
    return v;
}

/* ---- TMA: tiles between global memory (described by a CUtensorMap) and shared memory ------- */
/* The box at (c0 innermost, c1, c2) into dst, its bytes completing on bar. Parts of the box out of
   the map's bounds are filled with zeros (and still counted in the bytes). */
__device__ __forceinline__ void tl_tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(tl_smem_addr(dst)),
                 "l"((uint64_t)map), "r"(tl_smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
/* The box at (c0, c1, c2) from src; parts out of the map's bounds are not written. */
__device__ __forceinline__ void tl_tma_store_3d(const CUtensorMap *map, const void *src, int c0,
                                                int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
            (uint64_t)map),
        "r"(c0), "r"(c1), "r"(c2), "r"(tl_smem_addr(src))
        : "memory");
}
__device__ __forceinline__ void tl_tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* until the stores committed so far have read their shared memory */
__device__ __forceinline__ void tl_tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
/* until the stores committed so far are done */
__device__ __forceinline__ void tl_tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
/* writes of this thread to shared memory, made visible to the async proxy (TMA, wgmma) */
__device__ __forceinline__ void tl_fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void tl_prefetch_tensormap(const CUtensorMap *map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)map) : "memory");
}

/* ---- tensor maps edited on the device: a copy of a host-made map in shared memory gets a new
   extent, then the warp copies it to global memory with the release the TMA unit's reads of it
   need; a thread that then copies through it first acquires it ------------------------------- */
/* the extent of dimension DIM (0 innermost) of the map in shared memory */
template <int DIM>
__device__ __forceinline__ void tl_tensormap_set_dim(CUtensorMap *smem_map, uint32_t extent) {
    asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], %1, %2;" ::"r"(
                     tl_smem_addr(smem_map)),
                 "n"(DIM), "r"(extent)
                 : "memory");
}
/* all 32 lanes of a warp, with the same arguments */
__device__ __forceinline__ void tl_tensormap_publish(CUtensorMap *global_map,
                                                     const CUtensorMap *smem_map) {
    asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync."
                 "aligned [%0], [%1], 128;" ::"l"((uint64_t)global_map),
                 "r"(tl_smem_addr(smem_map))
                 : "memory");
}
__device__ __forceinline__ void tl_tensormap_acquire(const CUtensorMap *global_map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"((uint64_t)global_map)
                 : "memory");
}

/* four 8x8 matrices of 16-bit pairs (one register a lane each) into shared memory, lane l giving
   the address of row l % 8 of matrix l / 8 */
__device__ __forceinline__ void tl_stmatrix_x4(uint32_t addr, const uint32_t *r) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

/* two floats rounded to a pair of float16 (HALF) or bfloat16, low first */
template <bool HALF> __device__ __forceinline__ uint32_t tl_hopper_pack(float lo, float hi) {
    if constexpr (HALF) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
}

/* ---- wgmma ------------------------------------------------------------------------------- */
__device__ __forceinline__ void tl_wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tl_wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/* until at most N committed groups of this warpgroup's wgmma are in flight */
template <int N> __device__ __forceinline__ void tl_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Shared-memory matrix descriptor of a 128B-swizzled tile (64 bits): [0,14) start address >> 4,
   [16,30) leading-dimension byte offset >> 4, [32,46) stride-dimension byte offset >> 4, [49,52)
   base offset (0: the swizzle pattern is anchored at 1024-byte aligned addresses, which every
   tile of the core is), [62,64) swizzle mode (1 = 128B). */
__device__ __forceinline__ uint64_t tl_sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}
