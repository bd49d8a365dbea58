/* The block-sparse linear's forward and input gradient on the Hopper core's pieces (sm_90a,
   blocks of 64): a persistent CTA per multiprocessor takes tiles of 256 rows by one output block,
   a producer warpgroup walks the block's list loading x's block column and the weight block by
   TMA, two consumer warpgroups of 128 rows each multiply by wgmma m64n64k16 and store through
   shared memory by TMA. */
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/hopper_gemm.h"
#include "kernels/cuda/hopper_maps.cuh"
#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/hopper_wgmma.cuh"

namespace {

/* Tile 256 rows x 64 outputs x 64 (one block) of k: a stage is x's 256 x 64 (32 KiB) and one
   weight block (8 KiB); consumer warpgroup w owns rows 128 w .. 128 w + 127 as two m64n64 halves
   (64 f32 accumulators a thread). */
constexpr int BM = 256, BLOCK = 64, STAGES = 4, CONSUMERS = 2;
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int A_STAGE = BM * BLOCK, B_STAGE = BLOCK * BLOCK; /* elements */
constexpr int STAGE_BYTES = (A_STAGE + B_STAGE) * 2;
constexpr int STAGING = 128 * BLOCK; /* a consumer's 128 x 64 result, elements */
constexpr size_t SMEM =
    (size_t)STAGES * STAGE_BYTES + (size_t)CONSUMERS * STAGING * 2 + 2 * STAGES * 8 + 1024;

struct walk {
    int rows, outputs, nnz, dense_limit;
    const int32_t *offsets, *dense_index, *weight_index; /* weight_index NULL: entry e is block e */
    const void *bias;                                    /* forward; NULL for none */
};

/* Entry e of a list: x's block column *c times weight block *w, false where an index is out of
   range (skipped, as the other kernels skip it). */
__device__ __forceinline__ bool entry(const walk &k, int e, int *c, int *w) {
    *c = k.dense_index[e];
    *w = k.weight_index ? k.weight_index[e] : e;
    return *c >= 0 && *c < k.dense_limit && *w >= 0 && *w < k.nnz;
}

/* The list of output block o: [first, last), clamped into [0, nnz]. */
__device__ __forceinline__ void list_of(const walk &k, int o, int *first, int *last) {
    *first = min(max(k.offsets[o], 0), k.nnz);
    *last = min(max(k.offsets[o + 1], *first), k.nnz);
}

template <bool HALF> __device__ __forceinline__ float load_bias(const void *bias, int i) {
    if constexpr (HALF)
        return __half2float(((const __half *)bias)[i]);
    else
        return __bfloat162float(((const __nv_bfloat16 *)bias)[i]);
}

/* out[m0.., block o] = sum over o's list of x[m0.., block c] op(W_w) (+ bias): TRANS_B 0 (the
   forward) reads W_w as [n, k] rows (W_w^T: K-major), 1 (the input gradient) as [k, n]. Tile t is
   rows (t / outputs) * 256.., output block t % outputs: the CTAs of a round share x's rows. */
template <bool HALF, int TRANS_B>
__global__ void __launch_bounds__(THREADS, 1)
    block_sparse_kernel(const __grid_constant__ CUtensorMap map_x,
                        const __grid_constant__ CUtensorMap map_w,
                        const __grid_constant__ CUtensorMap map_out, walk k) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built for sm_90a only (CMakeLists.txt) */
#else
    extern __shared__ uint8_t smem_raw[];
    const tl_hopper_smem m =
        tl_hopper_carve(smem_raw, STAGES, A_STAGE, B_STAGE, CONSUMERS * STAGING);
    uint16_t *sa = m.a, *sb = m.b, *staging = m.staging;
    uint64_t *full = m.full, *empty = m.empty;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    const int tiles = (k.rows + BM - 1) / BM * k.outputs;
    if (threadIdx.x == 0) tl_hopper_ring_init(m, STAGES, CONSUMERS * 4);
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (t != 0) return;
        int stage = 0;
        uint32_t phase = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            const int m0 = tile / k.outputs * BM, o = tile % k.outputs;
            int first, last;
            list_of(k, o, &first, &last);
            for (int e = first; e < last; e++) {
                int c, w;
                if (!entry(k, e, &c, &w)) continue;
                tl_mbar_wait(&empty[stage], phase ^ 1);
                tl_mbar_expect_tx(&full[stage], STAGE_BYTES);
                tl_tma_load_3d(sa + stage * A_STAGE, &map_x, &full[stage], c * BLOCK, m0, 0);
                tl_tma_load_3d(sb + stage * B_STAGE, &map_w, &full[stage], 0, w * BLOCK, 0);
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    uint16_t *mine = staging + cw * STAGING;
    float acc[2][32];
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m0 = tile / k.outputs * BM, o = tile % k.outputs;
        int first, last, taken = 0, prev = -1;
        list_of(k, o, &first, &last);
        for (int e = first; e < last; e++) {
            int c, w;
            if (!entry(k, e, &c, &w)) continue;
            tl_mbar_wait(&full[stage], phase);
            const uint32_t a0 = tl_smem_addr(sa + stage * A_STAGE + cw * 128 * BLOCK);
            const uint32_t b0 = tl_smem_addr(sb + stage * B_STAGE);
            tl_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BLOCK / 16; kk++) {
                /* 128B-swizzled tiles as the dense core's (hopper_gemm_kernel.cuh): K-major rows
                   of 128 bytes, 8-row groups 1024 bytes apart, the k16 slice 32 bytes in; the
                   N-major weight block's k16 slice 16 rows (2048 bytes) on */
                const uint64_t db = TRANS_B ? tl_sw128_desc(b0 + kk * 16 * 128, 8192, 1024)
                                            : tl_sw128_desc(b0 + kk * 32, 16, 1024);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint64_t da = tl_sw128_desc(a0 + h * 64 * 128 + kk * 32, 16, 1024);
                    tl_wgmma_m64n64k16<HALF, 0, TRANS_B>(acc[h], da, db, (taken > 0 || kk > 0));
                }
            }
            tl_wgmma_commit();
            tl_wgmma_wait<1>();
            if (prev >= 0 && lane == 0) tl_mbar_arrive(&empty[prev]);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
            taken++;
        }
        tl_wgmma_wait<0>();
        if (prev >= 0 && lane == 0) tl_mbar_arrive(&empty[prev]);
        if (taken == 0) {
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 32; i++) acc[h][i] = 0.0f;
        }

        /* Epilogue: the m64n64 fragment (accumulator 4j + 2hh + e at row 16 warp + lane/4 + 8hh,
           column 8j + 2(lane%4) + e) plus the bias, by stmatrix into two 64 x 64 boxes of
           128-byte rows in the 128B swizzle of the out map (16-byte chunk c of row r at chunk
           c ^ (r % 8)), then two TMA stores */
        if (k.bias) {
            const int col = o * BLOCK + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float b0 = load_bias<HALF>(k.bias, col + 8 * j),
                            b1 = load_bias<HALF>(k.bias, col + 8 * j + 1);
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        acc[h][4 * j + 2 * hh] += b0;
                        acc[h][4 * j + 2 * hh + 1] += b1;
                    }
            }
        }
        const int q = lane / 8, rr = lane % 8;
        const int srow = warp * 16 + 8 * (q % 2) + rr;
        if (t == 0) tl_tma_store_wait_read();
        asm volatile("bar.sync %0, 128;" ::"r"(1 + cw) : "memory");
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int jj = 0; jj < 8; jj += 2) {
                uint32_t r[4];
#pragma unroll
                for (int x = 0; x < 4; x++) {
                    const int jx = jj + x / 2, hh = x % 2;
                    r[x] =
                        tl_hopper_pack<HALF>(acc[h][4 * jx + 2 * hh], acc[h][4 * jx + 2 * hh + 1]);
                }
                const int cb = jj + q / 2;
                const uint32_t addr =
                    tl_smem_addr(mine + h * 64 * 64) + srow * 128 + (((cb % 8) ^ rr) * 16);
                tl_stmatrix_x4(addr, r);
            }
        tl_fence_async_shared();
        asm volatile("bar.sync %0, 128;" ::"r"(1 + cw) : "memory");
        if (t == 0) {
            for (int h = 0; h < 2; h++)
                tl_tma_store_3d(&map_out, mine + h * 64 * 64, o * BLOCK, m0 + cw * 128 + h * 64, 0);
            tl_tma_store_commit();
        }
    }
    if (t == 0) tl_tma_store_wait();
#endif
}

template <bool HALF, int TRANS_B>
tl_status launch(int device, cudaStream_t stream, const CUtensorMap *maps, const walk &k, int grid,
                 const char *op) {
    auto kernel = block_sparse_kernel<HALF, TRANS_B>;
    TL_TRY(tl_cuda_func_set_max_shared(device, (const void *)kernel, (int)SMEM, op));
    kernel<<<grid, THREADS, SMEM, stream>>>(maps[0], maps[1], maps[2], k);
    return tl_cuda_check_launch(op);
}

bool aligned(const void *p, int64_t ld) {
    return p && (uintptr_t)p % 16 == 0 && ld % 8 == 0;
}

} // namespace

extern "C" bool tl_hopper_block_sparse_takes(int device, const tl_hopper_block_sparse *p) {
    const int64_t limit = (int64_t)1 << 31;
    return p->block == BLOCK && p->rows > 0 && p->rows < limit && p->outputs > 0 && p->nnz > 0 &&
           p->nnz * BLOCK < limit && p->dense_limit < limit &&
           (p->rows + BM - 1) / BM * p->outputs < limit && aligned(p->dense, p->dense_width) &&
           aligned(p->blocks, BLOCK) && aligned(p->out, p->out_width) && p->dense_width < limit &&
           p->out_width < limit && tl_hopper_gemm_available(device);
}

extern "C" tl_status tl_hopper_block_sparse_run(int device, cudaStream_t stream,
                                                const tl_hopper_block_sparse *p, const char *op) {
    CUtensorMap maps[3];
    TL_TRY(tl_hopper_make_map(p->half, p->dense, p->rows, p->dense_width, p->dense_width, 1, 0, BM,
                              op, &maps[0]));
    TL_TRY(tl_hopper_make_map(p->half, p->blocks, p->nnz * BLOCK, BLOCK, BLOCK, 1, 0, BLOCK, op,
                              &maps[1]));
    TL_TRY(tl_hopper_make_map(p->half, p->out, p->rows, p->out_width, p->out_width, 1, 0, 64, op,
                              &maps[2]));
    walk k = {(int)p->rows, (int)p->outputs, (int)p->nnz,     (int)p->dense_limit,
              p->offsets,   p->dense_index,  p->weight_index, p->bias};
    const int64_t tiles = (p->rows + BM - 1) / BM * p->outputs;
    const int grid = (int)std::max<int64_t>(1, std::min<int64_t>(tiles, tl_cuda_sm_count(device)));
    const bool transposed = !p->forward;
    if (p->half)
        return transposed ? launch<true, 1>(device, stream, maps, k, grid, op)
                          : launch<true, 0>(device, stream, maps, k, grid, op);
    return transposed ? launch<false, 1>(device, stream, maps, k, grid, op)
                      : launch<false, 0>(device, stream, maps, k, grid, op);
}
