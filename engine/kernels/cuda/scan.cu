/* CUDA cumsum and nonzero and their table, the dtypes of cpu/scan.c. cumsum: float32 and float64
   accumulate in double, bfloat16 and float16 in float32, integers and bool in uint64 (wrapping,
   written as int64), each output rounded once, as cpu/scan.c; a thread per row walks many short
   rows, a block per row scans long ones tile by tile (a block-wide scan, then a carry from tile to
   tile). nonzero: tiles of the input are counted, a one-block scan gives each tile's first row, and
   each tile writes its coordinates in row-major order; the count alone comes back to the host. */
#include <string.h>

#include <type_traits>

#include "kernels/cuda/describe.cuh"
#include "core/cuda/host_wait.h"
#include "kernels/cuda/ops_common.cuh"

#define SCAN_THREADS 256
#define SCAN_ITEMS   8 /* consecutive elements per thread in a tile of the block scan */
#define SCAN_TILE    (SCAN_THREADS * SCAN_ITEMS)
#define NZ_THREADS   256
#define NZ_ITEMS     16
#define NZ_TILE      (NZ_THREADS * NZ_ITEMS)

/* cumsum: rows at pos (tensors: 0 in, 1 out), len elements each, step_in / step_out apart; out
   has in's dtype for floating dtypes, int64 otherwise. */
typedef struct tl_cuda_cumsum {
    tl_cuda_where at;
    int dtype; /* the input's TL_CUDA_* */
    const void *in;
    void *out;
    int64_t len, step_in, step_out;
    tl_cuda_positions pos;
} tl_cuda_cumsum;

/* nonzero over in (contiguous, n elements of shape[0..ndim)). */
typedef struct tl_cuda_nonzero {
    tl_cuda_where at;
    int dtype; /* the input's TL_CUDA_* */
    const void *in;
    int64_t n;
    int ndim;
    int64_t shape[TL_CUDA_DIMS];
    int64_t *out; /* int64 [rows, ndim], contiguous (the fill) */
    int64_t rows;
} tl_cuda_nonzero;

/* ---- a block-wide exclusive scan ---------------------------------------------------------- */
/* The sum of v over the threads before this one (thread order), and in *total the block's sum;
   blockDim.x a multiple of 32, at most 1024, every thread calls it. smem holds 32 values. Ends
   with a barrier, so smem may be reused at once. */
template <typename A> __device__ A block_exclusive_scan(A v, A *total, A *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    A incl = v;
#pragma unroll
    for (int s = 1; s < 32; s <<= 1) {
        const A other = __shfl_up_sync(0xffffffffu, incl, s);
        if (lane >= s) incl += other;
    }
    A excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = A(0);
    if (lane == 31) smem[warp] = incl;
    __syncthreads();
    if (warp == 0) { /* the warps' sums, scanned in place (inclusive) */
        A w = lane < warps ? smem[lane] : A(0);
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
            const A other = __shfl_up_sync(0xffffffffu, w, s);
            if (lane >= s) w += other;
        }
        if (lane < warps) smem[lane] = w;
    }
    __syncthreads();
    const A before = warp > 0 ? smem[warp - 1] : A(0);
    *total = smem[warps - 1];
    __syncthreads();
    return before + excl;
}

/* ---- cumsum ----------------------------------------------------------------------------- */
/* Floating dtypes: A the running sum's type, the output the input's dtype. */
template <int D> struct cumsum_float {
    typedef tl_elem<D> E;
    typedef typename E::T T, O;
    typedef typename std::conditional<D == TL_CUDA_F32 || D == TL_CUDA_F64, double, float>::type A;
    __device__ static A load(T x) { return (A)E::load(x); }
    __device__ static O store(A a) { return E::from_wide((double)a); } /* one rounding */
};
/* Integer and bool dtypes: a uint64 sum (wrapping), written as int64 (two's complement). */
template <int D> struct cumsum_int {
    typedef typename tl_elem<D>::T T;
    typedef int64_t O;
    typedef unsigned long long A;
    __device__ static A load(T x) { return (A)tl_elem<D>::wide(x); } /* bool: 0 or 1 */
    __device__ static O store(A a) {
        return a <= (A)INT64_MAX ? (int64_t)a : -(int64_t)(~0ull - a) - 1;
    }
};
template <int D>
using cumsum_math =
    typename std::conditional<D == TL_CUDA_I32 || D == TL_CUDA_I64 || D == TL_CUDA_BOOL,
                              cumsum_int<D>, cumsum_float<D>>::type;

/* A thread per row: the row's elements in order. */
template <class M>
__global__ void __launch_bounds__(SCAN_THREADS)
    cumsum_rows(const typename M::T *in, typename M::O *out,
                const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step_in,
                int64_t step_out) {
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < pos.count;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        tl_position_offsets<2>(pos, o, off);
        const typename M::T *x = in + off[0];
        typename M::O *y = out + off[1];
        typename M::A acc = 0;
        for (int64_t r = 0; r < len; r++) {
            acc += M::load(x[r * step_in]);
            y[r * step_out] = M::store(acc);
        }
    }
}

/* A block per row, SCAN_TILE elements at a time: the tile is loaded (coalesced along a
   unit-stride row) into shared memory, each thread sums its SCAN_ITEMS consecutive elements in
   place, a block scan gives each thread the sum before its first element, and the tile is
   written back with the carry of the tiles before it. */
template <class M>
__global__ void __launch_bounds__(SCAN_THREADS)
    cumsum_block(const typename M::T *in, typename M::O *out,
                 const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step_in,
                 int64_t step_out) {
    typedef typename M::A A;
    __shared__ A values[SCAN_TILE];
    __shared__ A before[SCAN_THREADS];
    __shared__ A smem[32];
    const int t = threadIdx.x;
    for (int64_t o = blockIdx.x; o < pos.count; o += gridDim.x) {
        int64_t off[2];
        tl_position_offsets<2>(pos, o, off);
        const typename M::T *x = in + off[0];
        typename M::O *y = out + off[1];
        A carry = 0; /* the same in every thread */
        for (int64_t t0 = 0; t0 < len; t0 += SCAN_TILE) {
            for (int k = 0; k < SCAN_ITEMS; k++) {
                const int i = k * SCAN_THREADS + t;
                values[i] = t0 + i < len ? M::load(x[(t0 + i) * step_in]) : A(0);
            }
            __syncthreads();
            A run = 0;
            for (int k = 0; k < SCAN_ITEMS; k++) {
                run += values[t * SCAN_ITEMS + k];
                values[t * SCAN_ITEMS + k] = run;
            }
            A total;
            const A excl = block_exclusive_scan(run, &total, smem);
            before[t] = carry + excl;
            __syncthreads();
            for (int k = 0; k < SCAN_ITEMS; k++) {
                const int i = k * SCAN_THREADS + t;
                if (t0 + i < len)
                    y[(t0 + i) * step_out] = M::store(before[i / SCAN_ITEMS] + values[i]);
            }
            carry += total;
            __syncthreads(); /* values and before are rewritten by the next tile */
        }
    }
}

template <int D> static tl_status launch_cumsum_dtype(const tl_cuda_cumsum *c) {
    typedef cumsum_math<D> M;
    const tl_cuda_positions &pos = c->pos;
    const int64_t count = pos.count, sm = c->at.sm_count;
    const typename M::T *in = (const typename M::T *)c->in;
    typename M::O *out = (typename M::O *)c->out;
    cudaStream_t stream = c->at.stream;
    /* many rows (or short ones): a thread each; few long rows: a block each */
    if (c->len < 128 || count >= 512 * sm) {
        const unsigned grid = tl_cuda_grid(tl_ceil_div(count, SCAN_THREADS), c->at.sm_count);
        cumsum_rows<M>
            <<<grid, SCAN_THREADS, 0, stream>>>(in, out, pos, c->len, c->step_in, c->step_out);
    } else {
        const unsigned grid = tl_cuda_grid(count, c->at.sm_count);
        cumsum_block<M>
            <<<grid, SCAN_THREADS, 0, stream>>>(in, out, pos, c->len, c->step_in, c->step_out);
    }
    return tl_cuda_check_launch(c->at.op);
}

static tl_status launch_cumsum(const tl_cuda_cumsum *c) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(c->dtype, c->at.op, [&](auto e) -> tl_status {
        return launch_cumsum_dtype<decltype(e)::dtype>(c);
    });
}

/* ---- nonzero ---------------------------------------------------------------------------- */
/* NaN is non-zero, -0.0 is zero (value() compares as a number); bool: any non-zero byte */
template <class E> __device__ __forceinline__ bool is_nonzero(typename E::T x) {
    return E::value(x) != 0;
}

/* The geometry of the input, by value. */
struct nz_shape {
    int ndim;
    int64_t n;
    int64_t shape[TL_CUDA_DIMS];
};

/* starts[tile] = the number of non-zero elements of each NZ_TILE-element tile. */
template <class E>
__global__ void __launch_bounds__(NZ_THREADS)
    nz_count_tiles(const typename E::T *x, int64_t n, int64_t tiles, long long *starts) {
    __shared__ long long smem[32];
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        long long c = 0;
        for (int k = 0; k < NZ_ITEMS; k++) {
            const int64_t j = tile * NZ_TILE + (int64_t)k * NZ_THREADS + threadIdx.x;
            if (j < n && is_nonzero<E>(x[j])) c++;
        }
        long long total;
        block_exclusive_scan(c, &total, smem);
        if (threadIdx.x == 0) starts[tile] = total;
    }
}

/* One block: starts[0..tiles) (the tiles' counts) become their exclusive prefix sums, in place,
   and starts[tiles] the total. */
static __global__ void __launch_bounds__(NZ_THREADS)
    nz_scan_tiles(long long *starts, int64_t tiles) {
    __shared__ long long smem[32];
    long long carry = 0;
    for (int64_t first = 0; first < tiles; first += NZ_THREADS) {
        const int64_t i = first + threadIdx.x;
        const long long v = i < tiles ? starts[i] : 0;
        long long total;
        const long long excl = block_exclusive_scan(v, &total, smem);
        if (i < tiles) starts[i] = carry + excl;
        carry += total;
    }
    if (threadIdx.x == 0) starts[tiles] = carry;
}

/* Each tile's non-zero elements, in order: flags in shared memory (coalesced loads), each thread
   NZ_ITEMS consecutive flags, its first row from a block scan; coordinates of flat index j by
   division from the last dim. Rows past `rows` (the count the result was sized by) are not
   written. */
template <class E>
__global__ void __launch_bounds__(NZ_THREADS)
    nz_write(const typename E::T *x, const __grid_constant__ nz_shape s, int64_t tiles,
             const long long *starts, int64_t *out, int64_t rows) {
    __shared__ unsigned char flags[NZ_TILE];
    __shared__ long long smem[32];
    const int t = threadIdx.x;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t base = tile * NZ_TILE;
        for (int k = 0; k < NZ_ITEMS; k++) {
            const int i = k * NZ_THREADS + t;
            flags[i] = base + i < s.n && is_nonzero<E>(x[base + i]);
        }
        __syncthreads();
        long long c = 0;
        for (int k = 0; k < NZ_ITEMS; k++) c += flags[t * NZ_ITEMS + k];
        long long total;
        long long row = starts[tile] + block_exclusive_scan(c, &total, smem);
        for (int k = 0; k < NZ_ITEMS; k++) {
            const int i = t * NZ_ITEMS + k;
            if (!flags[i]) continue;
            if (row < rows) {
                int64_t j = base + i;
                for (int d = s.ndim - 1; d >= 0; d--) {
                    const int64_t q = j / s.shape[d];
                    out[row * s.ndim + d] = j - q * s.shape[d];
                    j = q;
                }
            }
            row++;
        }
        __syncthreads(); /* flags are rewritten by the next tile */
    }
}

/* starts (tiles + 1 entries of scratch): each tile's first row and the total. */
template <class E>
static tl_status launch_nonzero_starts(const tl_cuda_nonzero *z, tl_cuda_scratch &scratch,
                                       int64_t *tiles_out, long long **starts_out) {
    const int64_t tiles = tl_ceil_div(z->n, NZ_TILE);
    TL_TRY(scratch.get(z->at, (size_t)(tiles + 1) * sizeof(long long)));
    long long *starts = (long long *)scratch.ptr;
    const typename E::T *x = (const typename E::T *)z->in;
    const unsigned grid = tl_cuda_grid(tiles, z->at.sm_count);
    nz_count_tiles<E><<<grid, NZ_THREADS, 0, z->at.stream>>>(x, z->n, tiles, starts);
    TL_TRY(tl_cuda_check_launch(z->at.op));
    nz_scan_tiles<<<1, NZ_THREADS, 0, z->at.stream>>>(starts, tiles);
    TL_TRY(tl_cuda_check_launch(z->at.op));
    *tiles_out = tiles;
    *starts_out = starts;
    return TL_OK;
}

/* *count = the number of non-zero elements, on the host: the host waits for the device. */
static tl_status launch_nonzero_count(const tl_cuda_nonzero *z, int64_t *count) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(z->dtype, z->at.op, [&](auto e) -> tl_status {
        tl_cuda_scratch scratch;
        int64_t tiles;
        long long *starts, total = 0;
        TL_TRY(launch_nonzero_starts<decltype(e)>(z, scratch, &tiles, &starts));
        /* the one synchronisation of nonzero: the result's size is needed on the host */
        TL_CUDA_TRY(cudaMemcpyAsync(&total, starts + tiles, sizeof total, cudaMemcpyDeviceToHost,
                                    z->at.stream),
                    z->at.op, "reading the count back");
        TL_TRY(tl_cuda_wait(z->at.stream, z->at.op, "reading the count back"));
        TL_TRY(tl_cuda_raise_faults(z->at.device));
        *count = (int64_t)total;
        return TL_OK;
    });
}

/* Writes the coordinates of the non-zero elements into out, in row-major order (no wait). */
static tl_status launch_nonzero(const tl_cuda_nonzero *z) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(z->dtype, z->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        tl_cuda_scratch scratch;
        int64_t tiles;
        long long *starts;
        TL_TRY(launch_nonzero_starts<E>(z, scratch, &tiles, &starts));
        nz_shape s;
        s.ndim = z->ndim;
        s.n = z->n;
        for (int d = 0; d < TL_CUDA_DIMS; d++) s.shape[d] = d < z->ndim ? z->shape[d] : 1;
        const unsigned grid = tl_cuda_grid(tiles, z->at.sm_count);
        nz_write<E><<<grid, NZ_THREADS, 0, z->at.stream>>>((const typename E::T *)z->in, s, tiles,
                                                           starts, z->out, z->rows);
        return tl_cuda_check_launch(z->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* One kernel for every dtype (launch_cumsum dispatches on it): floating sums keep the input's
   dtype, integer and bool sums are int64. */
static tl_status cuda_cumsum(tl_tensor *out, const tl_tensor *in, int dim) {
    const tl_dtype out_dtype = tl_dtype_is_floating(in->dtype) ? in->dtype : TL_I64;
    if (out->dtype != out_dtype)
        return tl_error(TL_ERR_DTYPE, "cumsum: kernel expected a %s output, got %s",
                        tl_dtype_name(out_dtype), tl_dtype_name(out->dtype));
    tl_cuda_cumsum c{};
    c.dtype = tl_cuda_dtype_of(in);
    c.in = tl_data(in);
    c.out = tl_data(out);
    c.len = in->shape[dim];
    c.step_in = in->strides[dim];
    c.step_out = out->strides[dim];
    tl_cuda_positions_of(&c.pos, in, dim, {in, out});
    if (c.pos.count == 0 || c.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, "cumsum", &c.at));
    return launch_cumsum(&c);
}

static tl_status cuda_nonzero(tl_tensor *out, const tl_tensor *in, int64_t *count) {
    tl_cuda_nonzero z{};
    z.dtype = tl_cuda_dtype_of(in);
    z.n = tl_numel(in);
    z.ndim = in->ndim;
    z.in = z.n > 0 ? tl_data(in) : nullptr; /* an empty tensor's offset may be any */
    memcpy(z.shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    if (!out) {
        *count = 0;
        if (z.n == 0) return TL_OK;
        TL_TRY(tl_cuda_where_of(in, "nonzero", &z.at));
        return launch_nonzero_count(&z, count);
    }
    if (out->dtype != TL_I64 || out->ndim != 2 || out->shape[1] != in->ndim ||
        !tl_is_contiguous(out))
        return tl_error(TL_ERR_SHAPE, "nonzero: kernel expected a contiguous int64 output [n, %d]",
                        in->ndim);
    z.out = tl_cuda_data<int64_t>(out);
    z.rows = out->shape[0];
    if (z.n == 0 || z.rows == 0 || z.ndim == 0) return TL_OK; /* nothing to write */
    TL_TRY(tl_cuda_where_of(in, "nonzero", &z.at));
    return launch_nonzero(&z);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cumsum, TL_DTYPES_ALL, scan, cuda_cumsum),
    TL_KERNEL(nonzero, TL_DTYPES_ALL, nonzero, cuda_nonzero),
};

TL_KERNEL_TABLE(tl_cuda_scan_table, TL_DEVICE_CUDA, entries);
