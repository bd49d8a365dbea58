/* Internal: the device side shared by the CUDA elementwise kernels: strided offsets, and two
   kernels per functor (a flat one with 16-byte vector accesses, one by rows for any strides) with
   their launch. Dtypes and conversions: kernels/cuda/dtype.cuh. */
#ifndef TLUA_CUDA_ELEMENTWISE_CUH
#define TLUA_CUDA_ELEMENTWISE_CUH

#include <stdint.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/fast_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/kernel.h"

#define TL_CUDA_THREADS 256

/* The launch's four paths (kernels/kernel.h's loop variants), registered once in
   kernels/cuda/elementwise.cu for every kernel that runs it. */
enum { TL_EW_DENSE_VECTOR, TL_EW_DENSE_SCALAR, TL_EW_ROWS_VECTOR, TL_EW_ROWS_SCALAR };
extern "C" const tl_kernel_variant tl_cuda_elementwise_paths[4];

/* ---- the kernels: dense (flat, vectorised) and by rows (any strides) ----------------------- */
template <typename T, int N> struct alignas(sizeof(T) * N) tl_vec { T v[N]; };

template <typename T, int N> struct tl_ptrs { const T *p[N]; };

/* elements per 16-byte access of the wider of the two types */
template <typename TO, typename TI> __host__ __device__ constexpr int tl_vec_width() {
    return (int)(16 / (sizeof(TO) > sizeof(TI) ? sizeof(TO) : sizeof(TI)));
}

template <int NIN, typename F, typename TI>
__device__ __forceinline__ typename F::out_t tl_apply(const F &f, const TI *x) {
    if constexpr (NIN == 1)
        return f(x[0]);
    else if constexpr (NIN == 2)
        return f(x[0], x[1]);
    else
        return f(x[0], x[1], x[2]);
}

/* f over V lanes: r.v[j] = f(x[0][j], ..., x[NIN-1][j]). */
template <int NIN, int V, typename F>
__device__ __forceinline__ tl_vec<typename F::out_t, V>
tl_apply_vec(const F &f, const typename F::in_t (&x)[NIN][V]) {
    tl_vec<typename F::out_t, V> r;
#pragma unroll
    for (int j = 0; j < V; j++) {
        typename F::in_t args[NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) args[k] = x[k][j];
        r.v[j] = tl_apply<NIN>(f, args);
    }
    return r;
}

/* Dense operands: out[i] = f(in[k][i] or in[k][0] for a scalar input k), V elements per access
   where every pointer is aligned for it (vec_ok), a grid-stride loop. */
template <int NIN, typename F>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    tl_ew_dense(typename F::out_t *out, tl_ptrs<typename F::in_t, NIN> in, uint32_t scalar_mask,
                int64_t n, bool vec_ok, F f) {
    typedef typename F::out_t TO;
    typedef typename F::in_t TI;
    constexpr int V = tl_vec_width<TO, TI>();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool scalar[NIN];
    TI value[NIN];
#pragma unroll
    for (int k = 0; k < NIN; k++) {
        scalar[k] = (scalar_mask >> (k + 1)) & 1u;
        value[k] = scalar[k] ? in.p[k][0] : TI();
    }
    const int64_t nvec = vec_ok ? n / V : 0;
    for (int64_t v = tid; v < nvec; v += stride) {
        TI x[NIN][V];
#pragma unroll
        for (int k = 0; k < NIN; k++) {
            if (scalar[k]) {
#pragma unroll
                for (int j = 0; j < V; j++) x[k][j] = value[k];
            } else {
                tl_vec<TI, V> t = reinterpret_cast<const tl_vec<TI, V> *>(in.p[k])[v];
#pragma unroll
                for (int j = 0; j < V; j++) x[k][j] = t.v[j];
            }
        }
        reinterpret_cast<tl_vec<TO, V> *>(out)[v] = tl_apply_vec<NIN>(f, x);
    }
    for (int64_t i = nvec * V + tid; i < n; i += stride) {
        TI args[NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) args[k] = scalar[k] ? value[k] : in.p[k][i];
        out[i] = tl_apply<NIN>(f, args);
    }
}

/* The element offsets, in the first N operands of g, of position i over g's dims [0, ndim)
   (row-major). */
template <int N, typename I>
__device__ __forceinline__ void tl_offsets(const tl_cuda_geometry &g, int ndim, I i, int64_t *off) {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        I size = (I)g.shape[d];
        I q = i / size;
        I r = i - q * size;
#pragma unroll
        for (int k = 0; k < N; k++) off[k] += (int64_t)r * g.strides[k][d];
        i = q;
    }
}

/* tl_offsets of position i over all of g's dims, in 32-bit arithmetic where the count of
   positions n allows. */
template <int N>
__device__ __forceinline__ void tl_offsets_at(const tl_cuda_geometry &g, int64_t n, int64_t i,
                                              int64_t *off) {
    if (n <= (int64_t)UINT32_MAX)
        tl_offsets<N>(g, g.ndim, (uint32_t)i, off);
    else
        tl_offsets<N>(g, g.ndim, (uint64_t)i, off);
}

/* Any strides, by rows: g's last dim (width elements) is walked in chunks of V. A thread finds
   its chunk's row offsets once (a division per outer dim, 32-bit where items allows), then
   reads V elements of each operand: a 16-byte vector where its inner stride is 1 and vec_ok
   (width % V == 0, rows aligned), one value where it is 0, V strided loads otherwise. */
template <int NIN, typename F>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    tl_ew_rows(typename F::out_t *out, tl_ptrs<typename F::in_t, NIN> in, int64_t items,
               int64_t chunks_per_row, bool vec_ok, const __grid_constant__ tl_cuda_geometry g,
               F f) {
    typedef typename F::out_t TO;
    typedef typename F::in_t TI;
    constexpr int V = tl_vec_width<TO, TI>();
    const int inner = g.ndim - 1;
    const int64_t width = g.shape[inner];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < items;
         item += stride) {
        int64_t off[NIN + 1], chunk;
        if (items <= (int64_t)UINT32_MAX) {
            uint32_t row = (uint32_t)item / (uint32_t)chunks_per_row;
            chunk = (uint32_t)item - row * (uint32_t)chunks_per_row;
            tl_offsets<NIN + 1>(g, inner, row, off);
        } else {
            uint64_t row = (uint64_t)item / (uint64_t)chunks_per_row;
            chunk = (int64_t)((uint64_t)item - row * (uint64_t)chunks_per_row);
            tl_offsets<NIN + 1>(g, inner, row, off);
        }
        const int64_t j0 = chunk * V;
        TI x[NIN][V];
#pragma unroll
        for (int k = 0; k < NIN; k++) {
            const int64_t s = g.strides[k + 1][inner];
            const TI *p = in.p[k] + off[k + 1];
            if (s == 0) {
                const TI v = p[0];
#pragma unroll
                for (int e = 0; e < V; e++) x[k][e] = v;
            } else if (s == 1 && vec_ok) {
                tl_vec<TI, V> t = *reinterpret_cast<const tl_vec<TI, V> *>(p + j0);
#pragma unroll
                for (int e = 0; e < V; e++) x[k][e] = t.v[e];
            } else {
#pragma unroll
                for (int e = 0; e < V; e++) x[k][e] = j0 + e < width ? p[(j0 + e) * s] : TI();
            }
        }
        const tl_vec<TO, V> r = tl_apply_vec<NIN>(f, x);
        const int64_t so = g.strides[0][inner];
        TO *q = out + off[0];
        if (so == 1 && vec_ok) {
            *reinterpret_cast<tl_vec<TO, V> *>(q + j0) = r;
        } else {
#pragma unroll
            for (int e = 0; e < V; e++)
                if (j0 + e < width) q[(j0 + e) * so] = r.v[e];
        }
    }
}

/* Blocks for `work` items: enough to cover it, at most a few waves (grid-stride beyond). */
static inline unsigned tl_cuda_blocks(int64_t work, int sm_count) {
    int64_t blocks = (work + TL_CUDA_THREADS - 1) / TL_CUDA_THREADS;
    int64_t cap = (int64_t)sm_count * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

static inline bool tl_cuda_aligned(const void *p, size_t bytes) {
    return ((uintptr_t)p % bytes) == 0;
}

/* Runs f over the operands of l (out = operand 0, NIN inputs of F::in_t): one launch on l's
   stream (through cuLaunchKernel, fast_launch.cuh), no allocation, no synchronisation. */
template <int NIN, typename F> static tl_status tl_cuda_elementwise(const tl_cuda_launch *l, F f) {
    typedef typename F::out_t TO;
    typedef typename F::in_t TI;
    if (l->numel == 0) return TL_OK;
    cudaError_t err;
    TO *out = (TO *)l->data[0];
    tl_ptrs<TI, NIN> in;
    for (int k = 0; k < NIN; k++) in.p[k] = (const TI *)l->data[k + 1];
    if (l->dense) {
        constexpr int V = tl_vec_width<TO, TI>();
        bool vec_ok = tl_cuda_aligned(out, sizeof(TO) * V);
        for (int k = 0; k < NIN; k++)
            if (!((l->scalar_mask >> (k + 1)) & 1u))
                vec_ok = vec_ok && tl_cuda_aligned(in.p[k], sizeof(TI) * V);
        int64_t work = vec_ok ? (l->numel + V - 1) / V : l->numel;
        tl_loop_variant_ran(
            &tl_cuda_elementwise_paths[vec_ok ? TL_EW_DENSE_VECTOR : TL_EW_DENSE_SCALAR]);
        err = tl_cuda_launch_kernel<tl_ew_dense<NIN, F>>(
            l->device, tl_cuda_blocks(work, l->sm_count), TL_CUDA_THREADS, l->stream, out, in,
            l->scalar_mask, l->numel, vec_ok, f);
    } else {
        /* vectors need whole chunks and every row of a stride-1 operand aligned for them */
        constexpr int V = tl_vec_width<TO, TI>();
        const tl_cuda_geometry *g = &l->geometry;
        const int inner = g->ndim - 1;
        bool vec_ok = g->shape[inner] % V == 0;
        for (int k = 0; k <= NIN && vec_ok; k++) {
            if (g->strides[k][inner] != 1) continue;
            vec_ok = tl_cuda_aligned(l->data[k], (k ? sizeof(TI) : sizeof(TO)) * V);
            for (int d = 0; d < inner; d++) vec_ok = vec_ok && g->strides[k][d] % V == 0;
        }
        int64_t chunks_per_row = (g->shape[inner] + V - 1) / V;
        int64_t items = l->numel / g->shape[inner] * chunks_per_row;
        tl_loop_variant_ran(
            &tl_cuda_elementwise_paths[vec_ok ? TL_EW_ROWS_VECTOR : TL_EW_ROWS_SCALAR]);
        err = tl_cuda_launch_kernel<tl_ew_rows<NIN, F>>(
            l->device, tl_cuda_blocks(items, l->sm_count), TL_CUDA_THREADS, l->stream, out, in,
            items, chunks_per_row, vec_ok, *g, f);
    }
    return err == cudaSuccess ? TL_OK : tl_cuda_fail(err, l->op, "kernel launch");
}

#endif
