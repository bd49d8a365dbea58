/* The Hopper GEMM core's kernel: a persistent CTA walks output tiles found on the device (the
   scheduler), one producer warpgroup keeps a ring of shared-memory stages full by TMA, two
   consumer warpgroups multiply by wgmma and store through shared memory by TMA. */
#pragma once

#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/hopper_wgmma.cuh"

/* Block tile 128 x 256 x 64: consumer warpgroup w owns rows 64w..64w+63 over all 256 columns (one
   m64n256k16 wgmma per 16 of k, 128 f32 accumulators a thread); 4 stages of A (16 KiB) and B
   (32 KiB) in flight. */
constexpr int TL_HOP_BM = 128, TL_HOP_BN = 256, TL_HOP_BK = 64, TL_HOP_STAGES = 3;
constexpr int TL_HOP_CONSUMERS = 2;
constexpr int TL_HOP_THREADS = 128 * (TL_HOP_CONSUMERS + 1);
constexpr int TL_HOP_A_STAGE = TL_HOP_BM * TL_HOP_BK; /* elements */
constexpr int TL_HOP_B_STAGE = TL_HOP_BN * TL_HOP_BK;
constexpr int TL_HOP_STAGE_BYTES = (TL_HOP_A_STAGE + TL_HOP_B_STAGE) * 2;
constexpr int TL_HOP_STAGING = 64 * 256; /* a consumer's 64 x 256 result, elements */
constexpr size_t TL_HOP_SMEM = (size_t)TL_HOP_STAGES * TL_HOP_STAGE_BYTES +
                               (size_t)TL_HOP_CONSUMERS * TL_HOP_STAGING * 2 +
                               2 * TL_HOP_STAGES * 8 + 1024;
/* tile rows walked together, so that the CTAs of a wave share a few panels of A and B in L2 */
constexpr int TL_HOP_GROUP_M = 8;

/* What the scheduler reads, written by the schedule kernel (hopper_gemm.cu) from the ends. A
   segment is a group's rows, or (ROWS) the zero tail after the last end. */
struct tl_hopper_walk {
    int kind; /* TL_HOPPER_ROWS, TL_HOPPER_REDUCTION or TL_HOPPER_INPLACE (hopper_gemm.h) */
    int m, n, k;
    int groups, segments;   /* segments: groups (+ 1, the tail, for ROWS) */
    const int *tile_starts; /* [segments + 1]: the first tile of each segment, then the total */
    const int2 *bounds;     /* [segments]: {s, e} */
    /* per segment: ROWS one map (C, rows up to e); REDUCTION two (A, B, rows up to e) */
    const CUtensorMap *maps;
    /* INPLACE: counters of the consumer warpgroups that have read a 128-row block's rows (zeroed
       before the launch), `slots` of them taking turns: block r counts in slot r % slots, as its
       generation r / slots; its products are stored once the slot holds (generation + 1) times its
       readers. slots spans two rounds of the grid, so a slot's next generation is counted only by
       CTAs that have seen this one complete: no block's count is ever mixed with another's. */
    unsigned *rows_read;
    int slots;
};

/* One output tile: segment seg, rows m0.., columns n0.., k blocks kbase + 64 i for i < kblocks. */
struct tl_hopper_tile {
    int seg, m0, n0, kbase, kblocks;
};

/* The t-th tile of a tiles_m x tiles_n grid in the walk order: TL_HOP_GROUP_M tile rows at a
   time, column by column inside such a band. */
__device__ __forceinline__ void tl_hopper_band(int t, int tiles_m, int tiles_n, int *tm, int *tn) {
    const int per_band = TL_HOP_GROUP_M * tiles_n, band = t / per_band;
    const int first = band * TL_HOP_GROUP_M, rows = min(tiles_m - first, TL_HOP_GROUP_M);
    const int r = t - band * per_band;
    *tm = first + r % rows;
    *tn = r / rows;
}

/* The scheduler: tile idx of the walk, or false past the last. *seg is where the search starts (a
   CTA's tiles only move forward) and is left at the tile's segment. INPLACE: tile idx is column
   tile idx % tiles_n of row block idx / tiles_n (the grid a multiple of tiles_n: the tiles of a
   row block are taken in the same round, by tiles_n CTAs). */
__device__ __forceinline__ bool tl_hopper_next(const tl_hopper_walk &w, int idx, int *seg,
                                               tl_hopper_tile *tile) {
    if (w.kind == 2 /* INPLACE */) {
        const int tiles_n = (w.n + TL_HOP_BN - 1) / TL_HOP_BN;
        if (idx >= (w.m + TL_HOP_BM - 1) / TL_HOP_BM * tiles_n) return false;
        *tile = {0, idx / tiles_n * TL_HOP_BM, idx % tiles_n * TL_HOP_BN, 0,
                 (w.k + TL_HOP_BK - 1) / TL_HOP_BK};
        return true;
    }
    if (idx >= w.tile_starts[w.segments]) return false;
    int s = *seg;
    while (w.tile_starts[s + 1] <= idx) s++;
    *seg = s;
    const int t = idx - w.tile_starts[s];
    const int2 b = w.bounds[s];
    const int tiles_n = (w.n + TL_HOP_BN - 1) / TL_HOP_BN;
    int tm, tn;
    if (w.kind == 0 /* ROWS */) {
        tl_hopper_band(t, (b.y - b.x + TL_HOP_BM - 1) / TL_HOP_BM, tiles_n, &tm, &tn);
        *tile = {s, b.x + tm * TL_HOP_BM, tn * TL_HOP_BN, 0,
                 s < w.groups ? (w.k + TL_HOP_BK - 1) / TL_HOP_BK : 0};
    } else {
        tl_hopper_band(t, (w.m + TL_HOP_BM - 1) / TL_HOP_BM, tiles_n, &tm, &tn);
        *tile = {s, tm * TL_HOP_BM, tn * TL_HOP_BN, b.x, (b.y - b.x + TL_HOP_BK - 1) / TL_HOP_BK};
    }
    return true;
}

/* A consumer warpgroup's staged 64 x 256 result and where it goes: four 64 x 64 boxes from
   staging to (n0.., row0.., z) through map (a segment's map is acquired first). */
struct tl_hopper_store {
    const CUtensorMap *map;
    const uint16_t *staging;
    int n0, row0, z;
    bool segment_map;
    int row_block; /* INPLACE: whose readers it waits for */
};

__device__ __forceinline__ void tl_hopper_issue(const tl_hopper_store &s) {
    if (s.segment_map) tl_tensormap_acquire(s.map);
    for (int b = 0; b < 4; b++)
        tl_tma_store_3d(s.map, s.staging + b * 64 * 64, s.n0 + b * 64, s.row0, s.z);
    tl_tma_store_commit();
}

/* INPLACE: whether every consumer warpgroup of the row block's tiles has read its rows; wait:
   spin until they have (they are resident: the launch is cooperative). */
__device__ __forceinline__ bool tl_hopper_rows_read(const tl_hopper_walk &w, int row_block,
                                                    bool wait) {
    const unsigned readers = (unsigned)((w.n + TL_HOP_BN - 1) / TL_HOP_BN * TL_HOP_CONSUMERS);
    const unsigned target = (unsigned)(row_block / w.slots + 1) * readers;
    while (tl_flag_read(&w.rows_read[row_block % w.slots]) < target)
        if (!wait) return false;
    return true;
}

/* C = A op(B) tile by tile (see tl_hopper_gemm in hopper_gemm.h). TRANS_A: A M-major ([k, m]
   rows), else K-major; TRANS_B: B N-major ([k, n] rows), else K-major ([n, k]). The maps are
   3-D (innermost, rows, matrix): ROWS reads A and B from map_a, map_b and stores through the
   segment's C map; REDUCTION reads through the segment's A and B maps and stores through map_c
   (matrix = group). */
template <bool HALF, int TRANS_A, int TRANS_B>
__global__ void __launch_bounds__(TL_HOP_THREADS, 1)
    tl_hopper_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                          const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_c, tl_hopper_walk walk) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built for sm_90a only (CMakeLists.txt) */
#else
    extern __shared__ uint8_t smem_raw[];
    const tl_hopper_smem m = tl_hopper_carve(smem_raw, TL_HOP_STAGES, TL_HOP_A_STAGE,
                                             TL_HOP_B_STAGE, TL_HOP_CONSUMERS * TL_HOP_STAGING);
    uint16_t *sa = m.a, *sb = m.b, *staging = m.staging;
    uint64_t *full = m.full, *empty = m.empty;
    const bool rows_kind = walk.kind == 0, in_place = walk.kind == 2;

    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (threadIdx.x == 0) tl_hopper_ring_init(m, TL_HOP_STAGES, TL_HOP_CONSUMERS * 4);
    __syncthreads();

    if (wg == 0) {
        /* The producer gives registers back to the consumers; one thread walks the tiles. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (t != 0) return;
        tl_prefetch_tensormap(&map_a);
        tl_prefetch_tensormap(&map_b);
        int stage = 0, seg = 0;
        uint32_t phase = 0;
        tl_hopper_tile tile;
        for (int idx = blockIdx.x; tl_hopper_next(walk, idx, &seg, &tile); idx += gridDim.x) {
            const CUtensorMap *ma = &map_a, *mb = &map_b;
            int z = rows_kind ? tile.seg : 0; /* B's matrix: the group's (ROWS) */
            if (walk.kind == 1 /* REDUCTION: the segment's maps */) {
                ma = &walk.maps[2 * tile.seg], mb = &walk.maps[2 * tile.seg + 1], z = 0;
                if (tile.kblocks > 0) tl_tensormap_acquire(ma), tl_tensormap_acquire(mb);
            }
            for (int kb = 0; kb < tile.kblocks; kb++) {
                const int kc = tile.kbase + kb * TL_HOP_BK;
                tl_mbar_wait(&empty[stage], phase ^ 1);
                tl_mbar_expect_tx(&full[stage], TL_HOP_STAGE_BYTES);
                uint16_t *a = sa + stage * TL_HOP_A_STAGE, *b = sb + stage * TL_HOP_B_STAGE;
                if (TRANS_A == 0) {
                    tl_tma_load_3d(a, ma, &full[stage], kc, tile.m0, 0);
                } else { /* two 64(m) x 64(k) panels of 128-byte rows */
                    for (int c = 0; c < 2; c++)
                        tl_tma_load_3d(a + c * 64 * TL_HOP_BK, ma, &full[stage], tile.m0 + 64 * c,
                                       kc, 0);
                }
                if (TRANS_B == 0) {
                    tl_tma_load_3d(b, mb, &full[stage], kc, tile.n0, z);
                } else { /* four 64(n) x 64(k) panels */
                    for (int c = 0; c < 4; c++)
                        tl_tma_load_3d(b + c * 64 * TL_HOP_BK, mb, &full[stage], tile.n0 + 64 * c,
                                       kc, z);
                }
                if (++stage == TL_HOP_STAGES) stage = 0, phase ^= 1;
            }
        }
        return;
    }

    /* The consumers. */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1; /* rows 64 cw .. 64 cw + 63 of the tile */
    const int warp = t / 32, lane = t % 32;
    uint16_t *mine = staging + cw * TL_HOP_STAGING;
    float acc[128];
    int stage = 0, seg = 0;
    uint32_t phase = 0;
    tl_hopper_tile tile;
    /* INPLACE: the staged product of this warpgroup's previous tile waits for every reader of its
       rows; thread 0 stores it as soon as they are done (polled during the next mainloop) */
    bool pending = false;
    tl_hopper_store held = {};
    for (int idx = blockIdx.x; tl_hopper_next(walk, idx, &seg, &tile); idx += gridDim.x) {
        if (tile.kblocks == 0) {
#pragma unroll
            for (int i = 0; i < 128; i++) acc[i] = 0.0f;
        }
        int prev = -1;
        for (int kb = 0; kb < tile.kblocks; kb++) {
            tl_mbar_wait(&full[stage], phase);
            const uint32_t a0 = tl_smem_addr(sa + stage * TL_HOP_A_STAGE + cw * 64 * TL_HOP_BK);
            const uint32_t b0 = tl_smem_addr(sb + stage * TL_HOP_B_STAGE);
            tl_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < TL_HOP_BK / 16; kk++) {
                /* K-major 128B-swizzled: a row is 64 elements (128 bytes), 8-row groups 1024
                   bytes apart (SBO), the k16 slice kk 32 bytes further in (the hardware swizzles
                   the computed address). MN-major: the k16 slice is 16 rows of 128 bytes further
                   on, LBO the distance between 64-wide panels (8 KiB), SBO between 8-row k groups
                   (1 KiB). */
                const uint64_t da = TRANS_A ? tl_sw128_desc(a0 + kk * 16 * 128, 8192, 1024)
                                            : tl_sw128_desc(a0 + kk * 32, 16, 1024);
                const uint64_t db = TRANS_B ? tl_sw128_desc(b0 + kk * 16 * 128, 8192, 1024)
                                            : tl_sw128_desc(b0 + kk * 32, 16, 1024);
                tl_wgmma_m64n256k16<HALF, TRANS_A, TRANS_B>(acc, da, db, (kb > 0 || kk > 0));
            }
            tl_wgmma_commit();
            /* one k block of wgmma in flight: the one before it is done reading its stage */
            tl_wgmma_wait<1>();
            if (prev >= 0 && lane == 0) tl_mbar_arrive(&empty[prev]);
            prev = stage;
            if (++stage == TL_HOP_STAGES) stage = 0, phase ^= 1;
            if (pending && t == 0 && tl_hopper_rows_read(walk, held.row_block, false)) {
                tl_hopper_issue(held);
                pending = false;
            }
            __syncwarp();
        }
        tl_wgmma_wait<0>();
        if (prev >= 0 && lane == 0) tl_mbar_arrive(&empty[prev]);
        /* this warpgroup has read the tile's rows (its last wgmma read the last stage, whose load
           had landed) */
        if (in_place && t == 0) tl_flag_add(&walk.rows_read[tile.m0 / TL_HOP_BM % walk.slots]);

        /* Epilogue. The m64n256 f32 fragment: accumulator 4j + 2h + e sits at row
           16 warp + lane/4 + 8h, column 8j + 2(lane%4) + e of the warpgroup's 64 x 256 tile. Each
           8x8 block of it is what stmatrix m8n8 takes (lane l holds row l/4, columns 2(l%4)..+1),
           so one stmatrix.x4 stores column blocks j, j+1 for both row halves h. The staging (64
           rows x 256 columns) is four 64 x 64 boxes of 128-byte rows in the 128B swizzle of the C
           map: 16-byte chunk c of row r lives at chunk c ^ (r % 8), which also keeps stmatrix free
           of bank conflicts. */
        const int q = lane / 8, rr = lane % 8;
        const int srow = warp * 16 + 8 * (q % 2) + rr;
        if (t == 0) {
            if (pending) { /* not stored yet: its readers are about done */
                tl_hopper_rows_read(walk, held.row_block, true);
                tl_hopper_issue(held);
                pending = false;
            }
            /* the previous tile's stores out of the staging must have read it */
            tl_tma_store_wait_read();
        }
        held = {rows_kind ? &walk.maps[tile.seg] : &map_c,
                mine,
                tile.n0,
                tile.m0 + cw * 64,
                walk.kind == 1 /* REDUCTION */ ? tile.seg : 0,
                rows_kind,
                tile.m0 / TL_HOP_BM};
        asm volatile("bar.sync %0, 128;" ::"r"(1 + cw) : "memory");
#pragma unroll
        for (int jj = 0; jj < 32; jj += 2) {
            uint32_t r[4];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const int jx = jj + x / 2, h = x % 2;
                r[x] = tl_hopper_pack<HALF>(acc[4 * jx + 2 * h], acc[4 * jx + 2 * h + 1]);
            }
            const int cb = jj + q / 2; /* this lane's 8-column block */
            const uint32_t addr =
                tl_smem_addr(mine + (cb / 8) * 64 * 64) + srow * 128 + (((cb % 8) ^ rr) * 16);
            tl_stmatrix_x4(addr, r);
        }
        tl_fence_async_shared();
        asm volatile("bar.sync %0, 128;" ::"r"(1 + cw) : "memory");
        if (in_place)
            pending = true;
        else if (t == 0)
            tl_hopper_issue(held);
    }
    if (pending && t == 0) {
        tl_hopper_rows_read(walk, held.row_block, true);
        tl_hopper_issue(held);
    }
    /* shared memory must outlive the last store's reads */
    if (t == 0) tl_tma_store_wait();
#endif
}
