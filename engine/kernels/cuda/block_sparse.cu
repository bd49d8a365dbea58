/* CUDA block-sparse linear and its kernel table: a tensor-core kernel (mma.sync m16n8k16 on
   bf16/f16 with a cp.async multi-stage pipeline) whose K loop walks a block row's or column's
   list of blocks (or all rows, for the weight gradient), for blocks of 32 and 64; a plain kernel
   for the other dtypes, block sizes and alignments; the weight gradient as one cuBLAS batched
   GEMM over the pattern's blocks. */
#include <limits.h>

#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/hopper_gemm.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/kernel.h"
#include "kernels/cuda/ops_common.cuh"
#include "tlua/runtime.h"

enum { TL_CUDA_BSL_FORWARD, TL_CUDA_BSL_BACKWARD_INPUT, TL_CUDA_BSL_BACKWARD_WEIGHT };

/* One block-sparse product over blocks of size block (see kernels/kernel.h):
   forward          out [rows, R b] = dense [rows, C b] @ W^T + bias: per block row r (outputs
                    = R) the entries offsets[r] .., dense block dense_index[e] (< C), weight
                    block e;
   backward_input   out [rows, C b] = dense [rows, R b] @ W: per block column c (outputs = C)
                    the entries offsets[c] .., dense block dense_index[t] (< R), weight block
                    weight_index[t] (< nnz);
   backward_weight  out [nnz, b, b]: per block e (outputs = nnz), dense (the gradient
                    [rows, R b]) block dense_index[e] (< R) against other (x [rows, C b])
                    block weight_index[e] (< C), over all rows.
   Every index is checked against its limit on the device: one out of range is skipped. */
typedef struct tl_cuda_block_sparse {
    tl_cuda_where at;
    int mode, dtype; /* TL_CUDA_BSL_*, TL_CUDA_* */
    void *out;
    const void *dense, *other, *bias;
    const int32_t *offsets, *dense_index, *weight_index;
    int64_t rows, block, outputs, nnz, dense_limit, weight_limit;
    int64_t dense_width, other_width, out_width; /* row lengths in elements */
} tl_cuda_block_sparse;

/* forward and backward_input */

namespace {

constexpr int FORWARD = TL_CUDA_BSL_FORWARD, BACKWARD_INPUT = TL_CUDA_BSL_BACKWARD_INPUT;
constexpr int MAX_GRID_Y = 65535;

/* ---- the tensor-core kernel --------------------------------------------------------------
   Each CTA computes a BM x BLOCK tile of the output: rows m0 .. of one output block (forward:
   block row r of y; input gradient: block column c of dx). The K loop walks the block's list,
   BK-wide steps, each an A tile [BM, BK] (rows of x or dy, k-contiguous) and a B tile
   [BK, BLOCK] in shared memory, STAGES of them in flight. B is k-contiguous in the forward
   (W_e^T: rows of W_e) and n-contiguous in the input gradient (W_e). (The weight gradient is
   cuBLAS's batched GEMM, below.) */
template <int MODE, int BLOCK, int BM, int BK, int STAGES, int WM_ = (BM < 64 ? BM : 64)>
struct Tile {
    static constexpr int BN = BLOCK;
    static constexpr int WM = WM_, WN = 32; /* a warp's tile */
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
    static constexpr int THREADS = WARPS_M * WARPS_N * 32;
    static constexpr bool B_K = MODE == FORWARD;
    static constexpr int PAD = 8; /* halves: rows 16 bytes apart in banks, ldmatrix conflict-free */
    static constexpr int A_LD = BK + PAD, A_SIZE = BM * A_LD;
    static constexpr int B_LD = B_K ? BK + PAD : BN + PAD, B_SIZE = (B_K ? BN : BK) * B_LD;
    static constexpr int STAGE = A_SIZE + B_SIZE;
    static constexpr size_t SMEM = (size_t)STAGES * STAGE * sizeof(uint16_t);
    static_assert(BM % WM == 0 && BN % WN == 0 && BK % 16 == 0 && BLOCK % BK == 0, "tile");
};

/* The CTA's list of (dense block, weight block) pairs, staged in shared memory up to LIST
   entries (the rest read from global memory), so that a step's loads wait on no index. */
constexpr int LIST = 256;

/* What one thread copies per stage: its chunks' shared-memory offsets and the parts of their
   global addresses that do not change from step to step. */
template <int MODE, int BLOCK, int BM, int BK, int STAGES, int WM> struct Loader {
    typedef Tile<MODE, BLOCK, BM, BK, STAGES, WM> G;
    static constexpr int A_TOTAL = BM * BK / 8, B_TOTAL = G::BN * BK / 8; /* 16-byte chunks */
    static constexpr int A_CHUNKS = (A_TOTAL + G::THREADS - 1) / G::THREADS;
    static constexpr int B_CHUNKS = (B_TOTAL + G::THREADS - 1) / G::THREADS;
    const uint16_t *a[A_CHUNKS];
    int a_smem[A_CHUNKS], b_offset[B_CHUNKS], b_smem[B_CHUNKS];
    bool a_ok[A_CHUNKS];

    __device__ Loader(const tl_cuda_block_sparse &p, int64_t m0) {
        const uint16_t *dense = (const uint16_t *)p.dense;
#pragma unroll
        for (int t = 0; t < A_CHUNKS; t++) { /* [BM][BK]: rows of x or dy */
            const int id = threadIdx.x + t * G::THREADS, row = id / (BK / 8), cc = id % (BK / 8);
            a_ok[t] = m0 + row < p.rows;
            a[t] = dense + (a_ok[t] ? (m0 + row) * p.dense_width : 0) + cc * 8;
            a_smem[t] = row * G::A_LD + cc * 8;
        }
#pragma unroll
        for (int t = 0; t < B_CHUNKS; t++) {
            const int id = threadIdx.x + t * G::THREADS;
            if constexpr (G::B_K) { /* [BN][BK]: rows of W_e */
                const int n = id / (BK / 8), cc = id % (BK / 8);
                b_offset[t] = n * BLOCK + cc * 8, b_smem[t] = n * G::B_LD + cc * 8;
            } else { /* [BK][BN]: rows of W_e */
                const int k = id / (G::BN / 8), cc = id % (G::BN / 8);
                b_offset[t] = k * BLOCK + cc * 8, b_smem[t] = k * G::B_LD + cc * 8;
            }
        }
    }

    /* One step: dense block j, weight block w, kk into them (valid false: zeros). */
    __device__ void load_block(const tl_cuda_block_sparse &p, uint16_t *sa, uint16_t *sb, int64_t j,
                               int64_t w, bool valid, int kk) const {
        const uint16_t *other = (const uint16_t *)p.other + w * BLOCK * BLOCK +
                                (MODE == FORWARD ? kk : (int64_t)kk * BLOCK);
        const int64_t a_shift = j * BLOCK + kk;
#pragma unroll
        for (int t = 0; t < A_CHUNKS; t++) {
            if (A_TOTAL % G::THREADS && threadIdx.x + t * G::THREADS >= A_TOTAL) break;
            const bool ok = valid && a_ok[t];
            copy16(sa + a_smem[t], ok ? a[t] + a_shift : a[t], ok);
        }
#pragma unroll
        for (int t = 0; t < B_CHUNKS; t++) {
            if (B_TOTAL % G::THREADS && threadIdx.x + t * G::THREADS >= B_TOTAL) break;
            copy16(sb + b_smem[t], other + b_offset[t], valid);
        }
    }
};

template <int MODE, bool BF16, int BLOCK, int BM, int BK, int STAGES, int WM>
__device__ __forceinline__ void
compute_stage(const uint16_t *sa, const uint16_t *sb,
              float (*acc)[Tile<MODE, BLOCK, BM, BK, STAGES, WM>::WN / 8][4], int warp_m,
              int warp_n) {
    typedef Tile<MODE, BLOCK, BM, BK, STAGES, WM> G;
    const int lane = threadIdx.x % 32, mat = lane / 8, j = lane % 8;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ks++) {
        uint32_t a[G::WM / 16][4], b[G::WN / 8][2];
#pragma unroll
        for (int i = 0; i < G::WM / 16; i++) {
            const int m = warp_m * G::WM + i * 16;
            load_matrices(a[i], sa + (m + lane % 16) * G::A_LD + ks * 16 + (lane / 16) * 8);
        }
#pragma unroll
        for (int jj = 0; jj < G::WN / 16; jj++) {
            const int n = warp_n * G::WN + jj * 16;
            uint32_t r[4];
            if constexpr (G::B_K)
                load_matrices(r, sb + (n + (mat / 2) * 8 + j) * G::B_LD + ks * 16 + (mat % 2) * 8);
            else
                load_matrices_transposed(r, sb + (ks * 16 + (mat % 2) * 8 + j) * G::B_LD + n +
                                                (mat / 2) * 8);
            b[2 * jj][0] = r[0], b[2 * jj][1] = r[1];
            b[2 * jj + 1][0] = r[2], b[2 * jj + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < G::WM / 16; i++)
#pragma unroll
            for (int n = 0; n < G::WN / 8; n++) mma<BF16>(acc[i][n], a[i], b[n]);
    }
}

template <int MODE, bool BF16, int BLOCK, int BM, int BK, int STAGES, int WM>
__global__ void __launch_bounds__(Tile<MODE, BLOCK, BM, BK, STAGES, WM>::THREADS)
    mma_kernel(const tl_cuda_block_sparse p) {
    typedef Tile<MODE, BLOCK, BM, BK, STAGES, WM> G;
    typedef Loader<MODE, BLOCK, BM, BK, STAGES, WM> Load;
    typedef tl_elem<BF16 ? TL_CUDA_BF16 : TL_CUDA_F16> E;
    extern __shared__ __align__(16) uint16_t smem[];
    __shared__ int2 list[LIST];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % G::WARPS_M, warp_n = warp / G::WARPS_M;
    const int64_t output = blockIdx.x;
    constexpr int PER_BLOCK = BLOCK / BK;
    const int64_t first = min(max((int64_t)p.offsets[output], (int64_t)0), p.nnz);
    const int64_t last = min(max((int64_t)p.offsets[output + 1], first), p.nnz);
    const int64_t steps = (last - first) * PER_BLOCK;
    for (int64_t i = threadIdx.x; i < last - first && i < LIST; i += G::THREADS) {
        const int64_t e = first + i, j = p.dense_index[e];
        const int64_t w = p.weight_index ? (int64_t)p.weight_index[e] : e;
        const bool ok = j >= 0 && j < p.dense_limit && w >= 0 && w < p.weight_limit;
        list[i] = make_int2(ok ? (int)j : -1, ok ? (int)w : 0);
    }
    __syncthreads();
    /* the step's loads into stage slot */
    auto load = [&](const Load &ld, int64_t step, int slot) {
        uint16_t *sa = smem + slot * G::STAGE, *sb = sa + G::A_SIZE;
        const int64_t i = step / PER_BLOCK;
        int64_t j, w;
        if (i < LIST) {
            const int2 entry = list[i];
            j = entry.x, w = entry.y;
        } else {
            j = p.dense_index[first + i];
            w = p.weight_index ? (int64_t)p.weight_index[first + i] : first + i;
            if (j < 0 || j >= p.dense_limit || w < 0 || w >= p.weight_limit) j = -1, w = 0;
        }
        ld.load_block(p, sa, sb, j < 0 ? 0 : j, w, j >= 0, (int)(step % PER_BLOCK) * BK);
    };
    const int64_t m_tiles = (p.rows + BM - 1) / BM;
    for (int64_t tile = blockIdx.y; tile < m_tiles; tile += gridDim.y) {
        const int64_t m0 = tile * BM;
        const Load ld(p, m0);
        float acc[G::WM / 16][G::WN / 8][4] = {};
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
            if (s < steps) load(ld, s, s);
            commit_copies();
        }
        for (int64_t step = 0; step < steps; step++) {
            wait_copies<STAGES - 2>();
            __syncthreads();
            const int64_t next = step + STAGES - 1;
            if (next < steps) load(ld, next, (int)(next % STAGES));
            commit_copies();
            const uint16_t *sa = smem + (step % STAGES) * G::STAGE;
            compute_stage<MODE, BF16, BLOCK, BM, BK, STAGES, WM>(sa, sa + G::A_SIZE, acc, warp_m,
                                                                 warp_n);
        }
        wait_copies<0>();
        __syncthreads(); /* the next tile's loads reuse the stages */
        uint16_t *out = (uint16_t *)p.out;
        const uint16_t *bias = (const uint16_t *)p.bias;
#pragma unroll
        for (int i = 0; i < G::WM / 16; i++)
#pragma unroll
            for (int n = 0; n < G::WN / 8; n++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int64_t m = m0 + warp_m * G::WM + i * 16 + lane / 4 + half * 8;
                    const int col = warp_n * G::WN + n * 8 + (lane % 4) * 2;
                    float v0 = acc[i][n][half * 2], v1 = acc[i][n][half * 2 + 1];
                    if (m >= p.rows) continue;
                    if (MODE == FORWARD && bias) {
                        v0 += E::load(bias[output * BLOCK + col]);
                        v1 += E::load(bias[output * BLOCK + col + 1]);
                    }
                    uint16_t *dst = out + m * p.out_width + output * BLOCK + col;
                    const uint32_t packed = (uint32_t)E::store(v0) | (uint32_t)E::store(v1) << 16;
                    *(uint32_t *)dst = packed;
                }
    }
}

template <int MODE, bool BF16, int BLOCK, int BM, int BK, int STAGES, int WM = (BM < 64 ? BM : 64)>
tl_status launch_mma(const tl_cuda_block_sparse &p) {
    typedef Tile<MODE, BLOCK, BM, BK, STAGES, WM> G;
    auto kernel = mma_kernel<MODE, BF16, BLOCK, BM, BK, STAGES, WM>;
    /* the limit is a fact of each device: the runtime remembers where it was raised */
    TL_TRY(tl_cuda_func_set_max_shared(p.at.device, (const void *)kernel, (int)G::SMEM, p.at.op));
    const int64_t m_tiles = tl_ceil_div(p.rows, BM);
    dim3 grid((unsigned)p.outputs, (unsigned)(m_tiles < MAX_GRID_Y ? m_tiles : MAX_GRID_Y));
    kernel<<<grid, G::THREADS, G::SMEM, p.at.stream>>>(p);
    return tl_cuda_check_launch(p.at.op);
}

/* Tiles measured on an H100 (x [8192, 4096] -> 4096, bf16): for blocks of 64 128 x 64 with
   BK = 64 (one block per step), for 32 256 x 32. */
template <int MODE, bool BF16> tl_status run_mma(const tl_cuda_block_sparse &p) {
    if (p.block == 64) return launch_mma<MODE, BF16, 64, 128, 64, 4>(p);
    return launch_mma<MODE, BF16, 32, 256, 32, 4>(p);
}

/* ---- the plain kernel: one output element per thread, any floating dtype and block ------
   (float32 and float64, and what the tensor-core kernel does not take) */
template <typename E, int MODE>
__global__ void plain_kernel(const tl_cuda_block_sparse p, int64_t total) {
    typedef typename E::T T;
    typedef typename E::C C;
    const T *dense = (const T *)p.dense, *other = (const T *)p.other, *bias = (const T *)p.bias;
    T *out = (T *)p.out;
    const int64_t b = p.block, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        C acc = 0;
        {
            const int64_t i = idx / p.out_width, col = idx % p.out_width;
            const int64_t output = col / b, within = col % b;
            const int64_t first = min(max((int64_t)p.offsets[output], (int64_t)0), p.nnz);
            const int64_t last = min(max((int64_t)p.offsets[output + 1], first), p.nnz);
            for (int64_t e = first; e < last; e++) {
                const int64_t j = p.dense_index[e];
                const int64_t w = p.weight_index ? (int64_t)p.weight_index[e] : e;
                if (j < 0 || j >= p.dense_limit || w < 0 || w >= p.weight_limit) continue;
                const T *x = dense + i * p.dense_width + j * b, *blk = other + w * b * b;
                for (int64_t k = 0; k < b; k++)
                    acc += E::load(x[k]) *
                           E::load(MODE == FORWARD ? blk[within * b + k] : blk[k * b + within]);
            }
            if (MODE == FORWARD && bias) acc += E::load(bias[col]);
        }
        out[idx] = E::store(acc);
    }
}

template <int MODE> tl_status run_plain(const tl_cuda_block_sparse &p) {
    const int64_t total = p.rows * p.out_width;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(total, 256), p.at.sm_count);
    return tl_cuda_dispatch<TL_CUDA_FLOATING>(p.dtype, p.at.op, [&](auto e) {
        plain_kernel<decltype(e), MODE><<<grid, 256, 0, p.at.stream>>>(p, total);
        return tl_cuda_check_launch(p.at.op);
    });
}

/* The tensor-core kernel takes 16-bit dtypes, blocks of 32 or 64 and 16-byte aligned rows. */
bool fits_mma(const tl_cuda_block_sparse &p) {
    const uintptr_t bits = (uintptr_t)p.out | (uintptr_t)p.dense | (uintptr_t)p.other;
    return (p.dtype == TL_CUDA_BF16 || p.dtype == TL_CUDA_F16) &&
           (p.block == 32 || p.block == 64) && bits % 16 == 0 && p.dense_width % 8 == 0 &&
           p.other_width % 8 == 0 && p.out_width % 8 == 0;
}

/* The paths of the forward and the input gradient, each with the condition that picks it. */
constexpr tl_dtype_set HALVES = TL_DTYPES_BF16 | TL_DTYPES_F16;
const tl_kernel_variant variants[] = {
    TL_VARIANT(
        block_sparse_linear, HALVES, "hopper_b64",
        "a Hopper GPU, bfloat16/float16, blocks of 64, 16-byte aligned rows: wgmma tiles of "
        "256 rows by one block, TMA loads walking the block's list (hopper_block_sparse.cu)"),
    TL_VARIANT(block_sparse_linear, HALVES, "mma_b64",
               "bfloat16/float16, blocks of 64, 16-byte aligned rows: tensor cores, tiles of 128 "
               "rows by one block, 4 stages"),
    TL_VARIANT(block_sparse_linear, HALVES, "mma_b32",
               "bfloat16/float16, blocks of 32, 16-byte aligned rows: tensor cores, tiles of 256 "
               "rows by one block, 4 stages"),
    TL_VARIANT(block_sparse_linear, TL_DTYPES_FLOATING, "plain",
               "float32/float64, other block sizes, or rows not 16-byte aligned: one output "
               "element per thread"),
    TL_VARIANT(block_sparse_linear_backward_input, HALVES, "hopper_b64",
               "as the forward's hopper_b64, walking the column-wise index"),
    TL_VARIANT(block_sparse_linear_backward_input, HALVES, "mma_b64",
               "as the forward's mma_b64, walking the column-wise index"),
    TL_VARIANT(block_sparse_linear_backward_input, HALVES, "mma_b32",
               "as the forward's mma_b32, walking the column-wise index"),
    TL_VARIANT(block_sparse_linear_backward_input, TL_DTYPES_FLOATING, "plain",
               "as the forward's plain path"),
};

/* The Hopper kernel's description of p (forward or input gradient). */
tl_hopper_block_sparse hopper_of(const tl_cuda_block_sparse &p) {
    tl_hopper_block_sparse h = {};
    h.half = p.dtype == TL_CUDA_F16, h.forward = p.mode == FORWARD;
    h.block = p.block, h.rows = p.rows, h.outputs = p.outputs, h.nnz = p.nnz;
    h.dense_limit = p.dense_limit;
    h.dense = p.dense, h.blocks = p.other, h.bias = p.bias, h.out = p.out;
    h.dense_width = p.dense_width, h.out_width = p.out_width;
    h.offsets = p.offsets, h.dense_index = p.dense_index, h.weight_index = p.weight_index;
    return h;
}

template <int MODE> tl_status run_mode(const tl_cuda_block_sparse &p) {
    const tl_kernel_variant *v = &variants[MODE == FORWARD ? 0 : 4];
    if (!fits_mma(p)) return tl_variant_ran(&v[3], (tl_dtype)p.dtype), run_plain<MODE>(p);
    const tl_hopper_block_sparse h = hopper_of(p);
    if (tl_hopper_gemm_enabled() && tl_hopper_block_sparse_takes(p.at.device, &h)) {
        tl_variant_ran(&v[0], (tl_dtype)p.dtype);
        return tl_hopper_block_sparse_run(p.at.device, p.at.stream, &h, p.at.op);
    }
    tl_variant_ran(&v[p.block == 64 ? 1 : 2], (tl_dtype)p.dtype);
    return p.dtype == TL_CUDA_BF16 ? run_mma<MODE, true>(p) : run_mma<MODE, false>(p);
}

/* The weight gradient's GEMM operands per block e (cuBLAS column-major): A = x's block column
   c, B = dy's block column r (read transposed), C = block e; an index out of range reads
   block (0, 0) and is zeroed after (zero_invalid_blocks). */
__global__ void pointers_kernel(const tl_cuda_block_sparse p, int64_t element_size, const void **a,
                                const void **b, void **c) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.nnz; e += stride) {
        const int64_t r = p.dense_index[e], col = p.weight_index[e];
        const bool ok = r >= 0 && r < p.dense_limit && col >= 0 && col < p.weight_limit;
        a[e] = (const char *)p.other + (ok ? col : 0) * p.block * element_size;
        b[e] = (const char *)p.dense + (ok ? r : 0) * p.block * element_size;
        c[e] = (char *)p.out + e * p.block * p.block * element_size;
    }
}

__global__ void zero_invalid_kernel(const tl_cuda_block_sparse p, int64_t element_size) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t bytes = p.block * p.block * element_size;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.nnz; e += stride) {
        const int64_t r = p.dense_index[e], col = p.weight_index[e];
        if (r < 0 || r >= p.dense_limit || col < 0 || col >= p.weight_limit)
            memset((char *)p.out + e * bytes, 0, (size_t)bytes);
    }
}

int64_t element_size(int dtype) {
    return dtype == TL_CUDA_F64 ? 8 : dtype == TL_CUDA_F32 ? 4 : 2;
}

} // namespace

TL_VARIANT_TABLE(tl_cuda_block_sparse_variants, TL_DEVICE_CUDA, variants);

static tl_status launch_block_sparse(const tl_cuda_block_sparse *p) {
    if (p->outputs == 0 || p->rows == 0) return TL_OK;
    return p->mode == FORWARD ? run_mode<FORWARD>(*p) : run_mode<BACKWARD_INPUT>(*p);
}

static tl_status launch_pointers(const tl_cuda_block_sparse *p, void **pointers) {
    const unsigned grid = tl_cuda_grid(tl_ceil_div(p->nnz, 256), p->at.sm_count);
    pointers_kernel<<<grid, 256, 0, p->at.stream>>>(
        *p, element_size(p->dtype), (const void **)pointers, (const void **)pointers + p->nnz,
        pointers + 2 * p->nnz);
    return tl_cuda_check_launch(p->at.op);
}

static tl_status launch_zero_invalid(const tl_cuda_block_sparse *p) {
    const unsigned grid = tl_cuda_grid(tl_ceil_div(p->nnz, 256), p->at.sm_count);
    zero_invalid_kernel<<<grid, 256, 0, p->at.stream>>>(*p, element_size(p->dtype));
    return tl_cuda_check_launch(p->at.op);
}

/* ---- the table: the layout's indices per direction, the weight gradient by cuBLAS ---------- */
static const int32_t *indices(const tl_tensor *t) {
    return tl_cuda_data<const int32_t>(t);
}

/* Block e = x[:, c]^T-shaped product of all rows: cuBLAS's batched GEMM (column-major: C_e
   [b, b] = A_e [b, rows] B_e^T, A_e x's block column c, B_e dy's block column r, ld the row
   lengths), the pointer arrays made on the device from the coordinate list. Measured on an
   H100 against a tensor-core kernel of our own walking the rows: cuBLAS was 1.7x faster for
   blocks of 64 and as fast for 32. */
static tl_status weight_gradient(const tl_cuda_block_sparse *p, tl_dtype dtype) {
    if (p->rows > INT_MAX || p->dense_width > INT_MAX || p->other_width > INT_MAX ||
        p->nnz > INT_MAX)
        return tl_error(TL_ERR_ARGUMENT, "%s: %lld rows or %lld blocks exceed cuBLAS's int range",
                        p->at.op, (long long)p->rows, (long long)p->nnz);
    cublasHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas(p->at.device, p->at.op, &handle, &stream));
    void **pointers = nullptr;
    TL_TRY(tl_cuda_malloc(p->at.device, 3 * (size_t)p->nnz * sizeof(void *), p->at.op,
                          (void **)&pointers));
    tl_status status = launch_pointers(p, pointers);
    if (status == TL_OK) {
        cudaDataType_t type = tl_cuda_data_type(dtype);
        cublasComputeType_t compute = dtype == TL_F64 ? CUBLAS_COMPUTE_64F
                                      : dtype == TL_F32 && tl_cuda_matmul_allow_tf32()
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
        const double one64 = 1, zero64 = 0;
        const float one32 = 1, zero32 = 0;
        const bool wide = compute == CUBLAS_COMPUTE_64F;
        const int b = (int)p->block;
        cublasStatus_t st = cublasGemmBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)p->rows,
            wide ? (const void *)&one64 : &one32, (const void *const *)pointers, type,
            (int)p->other_width, (const void *const *)(pointers + p->nnz), type,
            (int)p->dense_width, wide ? (const void *)&zero64 : &zero32, pointers + 2 * p->nnz,
            type, b, (int)p->nnz, compute, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            status = tl_cublas_fail(st, p->at.op, "cublasGemmBatchedEx");
    }
    if (status == TL_OK) status = launch_zero_invalid(p);
    tl_cuda_free(p->at.device, pointers); /* given back behind the call, in stream order */
    return status;
}

/* The kernel of every op of the table, MODE saying which (TL_CUDA_BSL_*). */
template <int MODE>
static tl_status cuda_block_sparse(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                                   const tl_tensor *bias, const tl_block_layout *layout) {
    static const char *const op_names[] = {"block_sparse_linear",
                                           "block_sparse_linear_backward_input",
                                           "block_sparse_linear_backward_weight"};
    tl_cuda_block_sparse p = {};
    TL_TRY(tl_cuda_where_of(out, op_names[MODE], &p.at));
    const int64_t R = layout->row_offsets->shape[0] - 1, C = layout->col_offsets->shape[0] - 1;
    p.mode = MODE;
    p.dtype = (int)dense->dtype;
    p.out = tl_data(out);
    p.dense = tl_data(dense);
    p.other = tl_data(other);
    p.bias = bias ? tl_data(bias) : nullptr;
    p.rows = dense->shape[0];
    p.dense_width = dense->shape[1];
    p.nnz = layout->coo_rows->shape[0];
    if (MODE == TL_CUDA_BSL_BACKWARD_WEIGHT) {
        p.block = out->shape[1];
        p.outputs = p.nnz;
        p.dense_index = indices(layout->coo_rows), p.dense_limit = R;
        p.weight_index = indices(layout->coo_cols), p.weight_limit = C;
        p.other_width = other->shape[1];
        p.out_width = p.block;
    } else {
        const bool forward = MODE == TL_CUDA_BSL_FORWARD;
        p.block = other->shape[1];
        p.outputs = forward ? R : C;
        p.offsets = indices(forward ? layout->row_offsets : layout->col_offsets);
        p.dense_index = indices(forward ? layout->col_indices : layout->row_indices);
        p.dense_limit = forward ? C : R;
        p.weight_index = forward ? nullptr : indices(layout->col_blocks);
        p.weight_limit = p.nnz;
        p.other_width = p.block;
        p.out_width = out->shape[1];
    }
    if (MODE == TL_CUDA_BSL_BACKWARD_WEIGHT) return weight_gradient(&p, dense->dtype);
    return launch_block_sparse(&p);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(block_sparse_linear, TL_DTYPES_FLOATING, block_sparse,
              cuda_block_sparse<TL_CUDA_BSL_FORWARD>),
    TL_KERNEL(block_sparse_linear_backward_input, TL_DTYPES_FLOATING, block_sparse,
              cuda_block_sparse<TL_CUDA_BSL_BACKWARD_INPUT>),
    TL_KERNEL(block_sparse_linear_backward_weight, TL_DTYPES_FLOATING, block_sparse,
              cuda_block_sparse<TL_CUDA_BSL_BACKWARD_WEIGHT>),
};

TL_KERNEL_TABLE(tl_cuda_block_sparse_table, TL_DEVICE_CUDA, entries);
