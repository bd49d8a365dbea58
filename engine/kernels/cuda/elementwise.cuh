/* Internal: the device side shared by the CUDA elementwise kernels: element conversions (bit for
   bit those of kernels/cpu/convert.h), strided offsets, and two kernels per functor (a flat one
   with 16-byte vector accesses, one by rows for any strides) with their launch. */
#ifndef TLUA_CUDA_ELEMENTWISE_CUH
#define TLUA_CUDA_ELEMENTWISE_CUH

#include <stdint.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/fast_launch.cuh"
#include "kernels/cuda/launch.h"

#define TL_CUDA_THREADS 256

/* ---- conversions ----------------------------------------------------------------------- */
__device__ __forceinline__ float tl_dev_bf16_load(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}

/* round to nearest even; NaN stays NaN (quiet, sign and top payload kept) */
__device__ __forceinline__ uint16_t tl_dev_bf16_round(float f) {
    uint32_t u = __float_as_uint(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

__device__ __forceinline__ float tl_dev_f16_load(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t rest = h & 0x7fffu;
    uint32_t normal = (rest << 13) + ((127u - 15u) << 23);
    uint32_t special = 0x7f800000u | ((rest & 0x3ffu) << 13);
    uint32_t subnormal = __float_as_uint((float)rest * 0x1p-24f);
    uint32_t bits = rest >= 0x7c00u ? special : rest >= 0x0400u ? normal : subnormal;
    return __uint_as_float(sign | bits);
}

__device__ __forceinline__ uint16_t tl_dev_f16_round(float f) {
    uint32_t u = __float_as_uint(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    uint32_t rebased = abs - ((127u - 15u) << 23);
    uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
    uint32_t subnormal = __float_as_uint(__fadd_rn(__uint_as_float(abs), 0.5f)) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((abs >> 13) & 0x3ffu);
    uint32_t bits = abs > 0x7f800000u    ? nan
                    : abs >= 0x477ff000u ? 0x7c00u
                    : abs >= 0x38800000u ? normal
                                         : subnormal;
    return (uint16_t)(sign | bits);
}

/* f64 -> f32 rounded to odd: rounding that to bf16/f16 gives the f64 correctly rounded */
__device__ __forceinline__ float tl_dev_double_to_f32_odd(double v) {
    float f = __double2float_rz(v); /* toward zero: exact or one step short */
    if ((double)f == v || f != f) return f;
    return __uint_as_float(__float_as_uint(f) | 1u);
}

/* int64 -> f32 rounded to odd, for the same purpose */
__device__ __forceinline__ float tl_dev_i64_to_f32_odd(int64_t v) {
    uint64_t m = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    int shift = m >> 24 ? 40 - __clzll((long long)m) : 0;
    uint64_t kept = m >> shift;
    kept |= (kept << shift) != m;
    float f = (float)kept * (float)(1ull << shift);
    return v < 0 ? -f : f;
}

/* truncation toward zero, NaN -> 0, out of range saturates */
__device__ __forceinline__ int32_t tl_dev_double_to_i32(double v) {
    return v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}
__device__ __forceinline__ int64_t tl_dev_double_to_i64(double v) {
    return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

/* Storage of each floating dtype and how it loads into / stores from its compute type. */
struct tl_f32_io {
    typedef float storage;
    typedef float compute;
    __device__ static float load(float x) { return x; }
    __device__ static float store(float x) { return x; }
};
struct tl_f64_io {
    typedef double storage;
    typedef double compute;
    __device__ static double load(double x) { return x; }
    __device__ static double store(double x) { return x; }
};
struct tl_bf16_io {
    typedef uint16_t storage;
    typedef float compute;
    __device__ static float load(uint16_t x) { return tl_dev_bf16_load(x); }
    __device__ static uint16_t store(float x) { return tl_dev_bf16_round(x); }
};
struct tl_f16_io {
    typedef uint16_t storage;
    typedef float compute;
    __device__ static float load(uint16_t x) { return tl_dev_f16_load(x); }
    __device__ static uint16_t store(float x) { return tl_dev_f16_round(x); }
};

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
        tl_vec<TO, V> r;
#pragma unroll
        for (int j = 0; j < V; j++) {
            TI args[NIN];
#pragma unroll
            for (int k = 0; k < NIN; k++) args[k] = x[k][j];
            r.v[j] = tl_apply<NIN>(f, args);
        }
        reinterpret_cast<tl_vec<TO, V> *>(out)[v] = r;
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
        tl_vec<TO, V> r;
#pragma unroll
        for (int e = 0; e < V; e++) {
            TI args[NIN];
#pragma unroll
            for (int k = 0; k < NIN; k++) args[k] = x[k][e];
            r.v[e] = tl_apply<NIN>(f, args);
        }
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
        err = tl_cuda_launch_kernel<tl_ew_dense<NIN, F>>(tl_cuda_blocks(work, l->sm_count),
                                                         TL_CUDA_THREADS, l->stream, out, in,
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
        err = tl_cuda_launch_kernel<tl_ew_rows<NIN, F>>(tl_cuda_blocks(items, l->sm_count),
                                                        TL_CUDA_THREADS, l->stream, out, in, items,
                                                        chunks_per_row, vec_ok, *g, f);
    }
    return err == cudaSuccess ? TL_OK : tl_cuda_fail(err, l->op, "kernel launch");
}

#endif
