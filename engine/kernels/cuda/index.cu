/* CUDA index kernels along a dim and their table, the dtypes of cpu/index.c: gather and scatter
 * (elements moved by size; of duplicates in scatter any one wins), scatter_add (atomic adds:
 * duplicates add in any order) and scatter_reduce's prod, amax and amin (compare-and-swap loops).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/fault_guard.h"
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/scatter_reduce.h"

#define INDEX_THREADS 256

/* n / d for n, d < 2^31 by a multiply and a shift (Granlund and Montgomery's division by an
   invariant integer): with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1,
   n / d = (umulhi(n, m) + n) >> s, the sum below 2^32 since n and umulhi(n, m) are below 2^31. */
struct fast_divider {
    uint32_t d, m, s;
};
static fast_divider divider_of(int64_t d) {
    fast_divider f{(uint32_t)d, 0, 0};
    while ((1ull << f.s) < (uint64_t)d) f.s++;
    f.m = (uint32_t)(((1ull << 32) * ((1ull << f.s) - (uint64_t)d)) / (uint64_t)d + 1);
    return f;
}
__device__ __forceinline__ uint32_t divide(const fast_divider &f, uint32_t n) {
    return (__umulhi(n, f.m) + n) >> f.s;
}

/* The walk over the index's elements (row-major): element p's offsets in the three tensors
   (0: out or target, 1: index, 2: source), the tensor indexed along dim (skip) taking none for
   that dim; the index value times `along` adds it. */
typedef struct index_walk {
    int ndim, dim, skip;
    bool wide;              /* int64 index, else int32 */
    int64_t n, size, along; /* elements; the indexed tensor's size and stride along dim */
    int64_t base;           /* the index's index_base: value v is position v - base */
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[3][TL_MAX_DIMS];
    const volatile unsigned int
        *failed;          /* writes: the index checks' failure flag (fault_guard.h) */
    tl_cuda_fault *fault; /* gather: where a value out of range is reported, under fault_id */
    unsigned int fault_id;
    /* the quads and rows paths (below): dividers by the sizes of dims, and by the quads of a
       line of the last dim (quads) or the index's size along dim (rows) */
    fast_divider dims[TL_MAX_DIMS], per_line;
    int64_t inner; /* rows: the elements after dim, copied as one run */
} index_walk;

/* Whether a queued index check failed before this write kernel started (read once per block,
   from mapped host memory): then the kernel writes nothing, so an in-place op with a bad index
   leaves its target as it was. */
__device__ __forceinline__ bool checks_failed(const index_walk &w) {
    __shared__ bool failed;
    if (threadIdx.x == 0) failed = w.failed && *w.failed != 0;
    __syncthreads();
    return failed;
}

__device__ __forceinline__ void walk_offsets(const index_walk &w, int64_t p, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = w.ndim - 1; d >= 0; d--) {
        const int64_t i = p % w.shape[d];
        p /= w.shape[d];
        for (int k = 0; k < 3; k++)
            if (k != w.skip || d != w.dim) off[k] += i * w.strides[k][d];
    }
}

/* index value v as a position from 0 (wrapping: a value out of range stays so) */
__device__ __forceinline__ int64_t position_of(const index_walk &w, int64_t v) {
    return (int64_t)((uint64_t)v - (uint64_t)w.base);
}
/* the index value at `at` as a position from 0 */
__device__ __forceinline__ int64_t index_value(const index_walk &w, const void *index, int64_t at) {
    return position_of(w, w.wide ? ((const int64_t *)index)[at]
                                 : (int64_t)((const int32_t *)index)[at]);
}

/* gather's check as it reads: position v (from 0) of the index element at flat position p is
   in range, else it is reported in the fault record (the first failure since the host looked
   wins, as the queued checks' kernel does) and the caller reads zero */
__device__ __forceinline__ bool in_range(const index_walk &w, int64_t v, int64_t p) {
    if ((uint64_t)v < (uint64_t)w.size) return true;
    if (w.fault && atomicCAS(&w.fault->id, 0u, w.fault_id) == 0u) {
        w.fault->value = (long long)((uint64_t)v + (uint64_t)w.base);
        w.fault->position = p;
        __threadfence_system();
    }
    return false;
}

/* out[p] = src[p along dim at index[p]]; an index outside [0, size) (the queued check reports
   it) reads zero */
template <typename U>
__global__ void __launch_bounds__(INDEX_THREADS)
    gather_kernel(U *out, const U *src, const void *index, const __grid_constant__ index_walk w) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        out[off[0]] = in_range(w, v, p) ? src[off[2] + v * w.along] : U(0);
    }
}

/* ---- the quads path: a contiguous index whose last dim holds a multiple of 4 elements ------
   Thread q takes elements 4q .. 4q + 3 of the index, one line of the last dim: one vector load
   of the index, the offsets of their line by fast division (< 2^31 quads), the last dim's
   coordinate c + j for element j. */
__device__ __forceinline__ void load4(const int64_t *p, int64_t v[4]) {
    const longlong2 a = ((const longlong2 *)p)[0], b = ((const longlong2 *)p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void load4(const int32_t *p, int64_t v[4]) {
    const int4 a = *(const int4 *)p;
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}

/* offsets of line l (of the last dim) in the three tensors (the one indexed along dim none for
   dim), by fast division */
__device__ __forceinline__ void line_offsets(const index_walk &w, uint32_t l, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = w.ndim - 2; d >= 0; d--) {
        const uint32_t next = divide(w.dims[d], l);
        const int64_t i = l - next * w.dims[d].d;
        l = next;
        for (int k = 0; k < 3; k++)
            if (k != w.skip || d != w.dim) off[k] += i * w.strides[k][d];
    }
}
/* ... of quad q's line, and the last dim's coordinate c of its first element */
__device__ __forceinline__ void quad_offsets(const index_walk &w, uint32_t q, int64_t off[3],
                                             int64_t *c) {
    const uint32_t line = divide(w.per_line, q);
    *c = (int64_t)(q - line * w.per_line.d) * 4;
    line_offsets(w, line, off);
}
/* the step along the last dim of tensor k (none for the tensor indexed along it) */
__device__ __forceinline__ int64_t last_step(const index_walk &w, int k) {
    const int last = w.ndim - 1;
    return k == w.skip && last == w.dim ? 0 : w.strides[k][last];
}

template <typename U> struct alignas(4 * sizeof(U)) quad_of { U v[4]; };
template <typename U> __device__ __forceinline__ void store4(U *out, const quad_of<U> &q) {
    *(quad_of<U> *)out = q; /* out (a fresh tensor) aligned to 4 elements */
}

template <typename U, typename I>
__global__ void __launch_bounds__(INDEX_THREADS)
    gather_quads(U *__restrict__ out, const U *__restrict__ src, const I *__restrict__ index,
                 const __grid_constant__ index_walk w) {
    const uint32_t quads = (uint32_t)(w.n / 4), stride = gridDim.x * blockDim.x;
    const int64_t step = last_step(w, 2);
    for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
        int64_t off[3], c, v[4];
        quad_offsets(w, q, off, &c);
        load4(index + 4 * (int64_t)q, v);
        quad_of<U> o;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t at = position_of(w, v[j]);
            o.v[j] = in_range(w, at, 4 * (int64_t)q + j)
                         ? src[off[2] + (c + j) * step + at * w.along]
                         : U(0);
        }
        store4(out + 4 * (int64_t)q, o);
    }
}

/* ---- the rows path: an index constant but along dim (index_select's expanded positions) ----
   Row r of the output (r = o n + i, n the index's size along dim) is the run of `inner`
   contiguous elements after dim, copied from the source's row at index[i]: a warp per row,
   16-byte vectors where both rows are aligned to them. */
template <typename U, typename I>
__global__ void __launch_bounds__(INDEX_THREADS)
    gather_rows(U *__restrict__ out, const U *__restrict__ src, const I *__restrict__ index,
                const __grid_constant__ index_walk w) {
    const int lane = threadIdx.x % 32;
    const uint32_t rows = (uint32_t)(w.n / w.inner), warps = gridDim.x * (blockDim.x / 32);
    for (uint32_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        uint32_t o = divide(w.per_line, r);
        const int64_t i = r - o * w.per_line.d;
        int64_t from = 0;
        for (int d = w.dim - 1; d >= 0; d--) {
            const uint32_t next = divide(w.dims[d], o);
            from += (int64_t)(o - next * w.dims[d].d) * w.strides[2][d];
            o = next;
        }
        const int64_t v = position_of(w, index[i * w.strides[1][w.dim]]);
        U *to = out + (int64_t)r * w.inner;
        if (!in_range(w, v, (int64_t)r * w.inner)) { /* zeros, as the walk reads */
            for (int64_t k = lane; k < w.inner; k += 32) to[k] = U(0);
            continue;
        }
        const U *row = src + from + v * w.along;
        const int per = 16 / (int)sizeof(U);
        if (w.inner % per == 0 && ((uintptr_t)row | (uintptr_t)to) % 16 == 0) {
            const uint4 *a = (const uint4 *)row;
            uint4 *b = (uint4 *)to;
            const int64_t vectors = w.inner / per;
#pragma unroll 4
            for (int64_t k = lane; k < vectors; k += 32) b[k] = a[k];
        } else {
            for (int64_t k = lane; k < w.inner; k += 32) to[k] = row[k];
        }
    }
}

/* ---- the line path: indexing along the last dim, the indexed line in shared memory -------
   A block per line of the index: the indexed tensor's line (at most LINE_BYTES) is read into
   shared memory once, coalesced, then each index element reads (gather) or adds atomically
   (scatter_add) there; scatter_add writes the line back. */
#define LINE_BYTES 49152

/* to[k] = from[k * step] for k < n by the block's threads: 16-byte vectors where they fit */
template <typename U>
__device__ __forceinline__ void move_line(U *to, int64_t to_step, const U *from, int64_t from_step,
                                          int64_t n) {
    if (to_step == 1 && from_step == 1 && n * (int64_t)sizeof(U) % 16 == 0 &&
        ((uintptr_t)to | (uintptr_t)from) % 16 == 0) {
        const int64_t vectors = n * (int64_t)sizeof(U) / 16;
        for (int64_t k = threadIdx.x; k < vectors; k += blockDim.x)
            ((uint4 *)to)[k] = ((const uint4 *)from)[k];
    } else {
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) to[k * to_step] = from[k * from_step];
    }
}

template <typename U, typename I>
__global__ void __launch_bounds__(INDEX_THREADS)
    gather_line(U *__restrict__ out, const U *__restrict__ src, const I *__restrict__ index,
                const __grid_constant__ index_walk w) {
    extern __shared__ uint4 line_memory[];
    U *line = (U *)line_memory;
    const int64_t width = w.shape[w.ndim - 1];
    const uint32_t lines = (uint32_t)(w.n / width);
    const bool quads = width % 4 == 0 && (uintptr_t)index % (4 * sizeof(I)) == 0 &&
                       (uintptr_t)out % (4 * sizeof(U)) == 0;
    for (uint32_t l = blockIdx.x; l < lines; l += gridDim.x) {
        int64_t off[3];
        line_offsets(w, l, off);
        move_line(line, 1, src + off[2], w.along, w.size);
        __syncthreads();
        if (quads) { /* 4 elements a thread: vector loads of the index, a vector store */
            for (int64_t q = threadIdx.x; q < width / 4; q += blockDim.x) {
                int64_t v[4];
                load4(index + off[1] + 4 * q, v);
                quad_of<U> o;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int64_t at = position_of(w, v[j]);
                    o.v[j] = in_range(w, at, (int64_t)l * width + 4 * q + j) ? line[at] : U(0);
                }
                store4(out + off[0] + 4 * q, o);
            }
        } else {
            for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
                const int64_t v = position_of(w, index[off[1] + j]);
                out[off[0] + j] = in_range(w, v, (int64_t)l * width + j) ? line[v] : U(0);
            }
        }
        __syncthreads();
    }
}

/* target[p along dim at index[p]] += src[p], atomically; an index out of range adds nothing */
__device__ __forceinline__ void add_at(float *t, float v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(double *t, double v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(__nv_bfloat16 *t, __nv_bfloat16 v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(__half *t, __half v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(int32_t *t, int32_t v) {
    atomicAdd((int *)t, (int)v);
}
__device__ __forceinline__ void add_at(int64_t *t, int64_t v) { /* wraps, as two's complement */
    atomicAdd((unsigned long long *)t, (unsigned long long)v);
}

template <typename T>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_add_kernel(T *target, const T *src, const void *index,
                       const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) add_at(target + off[0] + v * w.along, src[off[2]]);
    }
}

/* the same by quads (as gather_quads) */
template <typename T, typename I>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_add_quads(T *target, const T *__restrict__ src, const I *__restrict__ index,
                      const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    const uint32_t quads = (uint32_t)(w.n / 4), stride = gridDim.x * blockDim.x;
    const int64_t tstep = last_step(w, 0), sstep = last_step(w, 2);
    for (uint32_t q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += stride) {
        int64_t off[3], c, v[4];
        quad_offsets(w, q, off, &c);
        load4(index + 4 * (int64_t)q, v);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t at = position_of(w, v[j]);
            if ((uint64_t)at < (uint64_t)w.size)
                add_at(target + off[0] + (c + j) * tstep + at * w.along,
                       src[off[2] + (c + j) * sstep]);
        }
    }
}

/* the same by lines (as gather_line): the target's line in shared memory, written back */
template <typename T, typename I>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_add_line(T *target, const T *__restrict__ src, const I *__restrict__ index,
                     const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    extern __shared__ uint4 line_memory[];
    T *line = (T *)line_memory;
    const int64_t width = w.shape[w.ndim - 1], step = w.strides[2][w.ndim - 1];
    const uint32_t lines = (uint32_t)(w.n / width);
    /* quads: src contiguous along the last dim, every line's start aligned to 4 elements */
    bool quads = width % 4 == 0 && step == 1 && (uintptr_t)index % (4 * sizeof(I)) == 0 &&
                 (uintptr_t)src % (4 * sizeof(T)) == 0;
    for (int d = 0; d < w.ndim - 1; d++) quads = quads && w.strides[2][d] % 4 == 0;
    for (uint32_t l = blockIdx.x; l < lines; l += gridDim.x) {
        int64_t off[3];
        line_offsets(w, l, off);
        move_line(line, 1, target + off[0], w.along, w.size);
        __syncthreads();
        if (quads) { /* 4 elements a thread: vector loads of the index and of src */
            for (int64_t q = threadIdx.x; q < width / 4; q += blockDim.x) {
                int64_t v[4];
                load4(index + off[1] + 4 * q, v);
                const quad_of<T> x = *(const quad_of<T> *)(src + off[2] + 4 * q);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int64_t at = position_of(w, v[j]);
                    if ((uint64_t)at < (uint64_t)w.size) add_at(line + at, x.v[j]);
                }
            }
        } else {
            for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
                const int64_t v = position_of(w, index[off[1] + j]);
                if ((uint64_t)v < (uint64_t)w.size) add_at(line + v, src[off[2] + j * step]);
            }
        }
        __syncthreads();
        move_line(target + off[0], w.along, line, 1, w.size);
        __syncthreads();
    }
}

/* target[p along dim at index[p]] = src[p]; duplicates race (one of them wins); an index out of
   range writes nothing */
template <typename U>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_kernel(U *target, const U *src, const void *index,
                   const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) target[off[0] + v * w.along] = src[off[2]];
    }
}

/* The unsigned type of an element's bits, for atomicCAS (16-bit CAS needs compute 7.0) */
template <int Bytes> struct cas_bits;
template <> struct cas_bits<2> { typedef unsigned short U; };
template <> struct cas_bits<4> { typedef unsigned int U; };
template <> struct cas_bits<8> { typedef unsigned long long U; };

/* the fold of kernels/scatter_reduce.h in E's compute type */
template <class E>
__device__ __forceinline__ typename E::C fold(int mode, typename E::C t, typename E::C s) {
    typedef typename E::C C;
    if constexpr (E::dtype == TL_CUDA_F64)
        return tl_scatter_fold_d(mode, t, s);
    else if constexpr (E::dtype == TL_CUDA_I32 || E::dtype == TL_CUDA_I64)
        return (C)tl_scatter_fold_i(mode, (int64_t)t, (int64_t)s); /* int32 keeps its low bits */
    else
        return tl_scatter_fold_f(mode, t, s);
}

/* *at = fold(*at, s) atomically: a compare-and-swap loop on the element's bits */
template <class E>
__device__ __forceinline__ void fold_at(typename E::T *at, typename E::T s, int mode) {
    typedef typename E::T T;
    typedef typename cas_bits<sizeof(T)>::U U;
    U *bits = (U *)at;
    U seen = *(volatile U *)bits, expected;
    do {
        expected = seen;
        T current;
        memcpy(&current, &expected, sizeof current);
        const T next = E::store(fold<E>(mode, E::load(current), E::load(s)));
        U wanted;
        memcpy(&wanted, &next, sizeof wanted);
        if (wanted == expected) return;
        seen = atomicCAS(bits, expected, wanted);
    } while (seen != expected);
}

template <class E>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_reduce_kernel(typename E::T *target, const typename E::T *src, const void *index,
                          const __grid_constant__ index_walk w, int mode) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) fold_at<E>(target + off[0] + v * w.along, src[off[2]], mode);
    }
}

/* ---- launches ------------------------------------------------------------------------------ */
/* The walk of index over (t0, index, t2), t[skip] indexed along dim. */
static void walk_of(index_walk *w, const tl_tensor *index, const tl_tensor *t0, const tl_tensor *t2,
                    int dim, int skip) {
    const tl_tensor *t[3] = {t0, index, t2};
    memset(w, 0, sizeof *w);
    w->ndim = index->ndim;
    w->dim = dim;
    w->skip = skip;
    w->wide = index->dtype == TL_I64;
    w->base = index->index_base;
    w->n = tl_numel(index);
    for (int d = 0; d < index->ndim; d++) {
        w->shape[d] = index->shape[d];
        for (int k = 0; k < 3; k++) w->strides[k][d] = t[k]->strides[d];
    }
    const tl_tensor *indexed = t[skip];
    w->size = indexed->ndim ? indexed->shape[dim] : 1;
    w->along = indexed->ndim ? indexed->strides[dim] : 0;
}

/* f(U{}) for the unsigned type of an element of size bytes: elements that move as bits */
template <class F> static tl_status by_element_size(int64_t size, F f) {
    switch (size) {
    case 1:
        return f(uint8_t{});
    case 2:
        return f(uint16_t{});
    case 4:
        return f(uint32_t{});
    default:
        return f(uint64_t{});
    }
}
/* f(I{}) for the index's element type */
template <class F> static tl_status by_index_type(const index_walk &w, F f) {
    return w.wide ? f(int64_t{}) : f(int32_t{});
}

/* The paths of the index kernels (a loop many kernels share: kernels/kernel.h) */
enum { INDEX_WALK, INDEX_QUADS, INDEX_ROWS, INDEX_LINE };
static const tl_kernel_variant index_variants[] = {
    TL_LOOP_VARIANT("index", TL_DTYPES_ALL, "walk",
                    "any layout: each element's offsets by division"),
    TL_LOOP_VARIANT("index", TL_DTYPES_ALL, "quads",
                    "a contiguous index aligned to 4 elements, its last dim a multiple of 4, fewer "
                    "than 2^33 elements: a thread per 4 elements"),
    TL_LOOP_VARIANT("index", TL_DTYPES_ALL, "rows",
                    "gather by an index constant but along dim (index_select), >= 32 elements "
                    "after dim contiguous in the source: a warp copies each row"),
    TL_LOOP_VARIANT("index", TL_DTYPES_ALL, "line",
                    "along the last dim, a contiguous index, the indexed line within 48 KiB: a "
                    "block per line, the line in shared memory"),
};

static bool below_2_31(int64_t v) {
    return v >= 0 && v < ((int64_t)1 << 31);
}

/* the quads path's dividers, when the index takes it */
static bool plan_quads(index_walk *w, const tl_tensor *index) {
    if (index->ndim == 0 || !tl_is_contiguous(index)) return false;
    const int64_t width = index->shape[index->ndim - 1];
    if (width % 4 != 0 || !below_2_31(w->n / 4)) return false;
    if ((uintptr_t)tl_data(index) % (uintptr_t)(4 * tl_dtype_size(index->dtype)) != 0) return false;
    w->per_line = divider_of(width / 4);
    for (int d = 0; d < index->ndim - 1; d++) w->dims[d] = divider_of(index->shape[d]);
    return true;
}

/* the line path's dividers, when the index takes it (indexed: the tensor indexed along dim) */
static bool plan_line(index_walk *w, const tl_tensor *index, const tl_tensor *indexed) {
    if (index->ndim == 0 || w->dim != index->ndim - 1 || !tl_is_contiguous(index)) return false;
    const int64_t width = index->shape[index->ndim - 1];
    if (w->size * tl_dtype_size(indexed->dtype) > LINE_BYTES || !below_2_31(w->n / width))
        return false;
    for (int d = 0; d < index->ndim - 1; d++) w->dims[d] = divider_of(index->shape[d]);
    return true;
}

/* the rows path's plan, when gather's index and source take it */
static bool plan_rows(index_walk *w, const tl_tensor *index, const tl_tensor *src) {
    if (index->ndim == 0) return false;
    int64_t inner = 1;
    for (int d = index->ndim - 1; d >= 0; d--) {
        if (d != w->dim && index->shape[d] != 1 && index->strides[d] != 0) return false;
        if (d <= w->dim) continue;
        if (index->shape[d] != src->shape[d] || (src->shape[d] != 1 && src->strides[d] != inner))
            return false;
        inner *= index->shape[d];
    }
    if (inner < 32 || !below_2_31(w->n / inner) || !below_2_31(index->shape[w->dim])) return false;
    w->inner = inner;
    w->per_line = divider_of(index->shape[w->dim]);
    for (int d = 0; d < w->dim; d++) w->dims[d] = divider_of(index->shape[d]);
    return true;
}

static tl_status cuda_gather(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    const tl_tensor *src = in[0], *index = in[1];
    index_walk w;
    walk_of(&w, index, out[0], src, args->dim, 2);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "gather", &at));
    if (args->index_range)
        TL_TRY(tl_cuda_fault_arm(at.device, args->index_range, index->shape, index->ndim, &w.fault,
                                 &w.fault_id));
    const int64_t size = tl_dtype_size(src->dtype);
    const int path =
        plan_rows(&w, index, src)   ? INDEX_ROWS
        : plan_line(&w, index, src) ? INDEX_LINE
        : (uintptr_t)tl_data(out[0]) % (uintptr_t)(4 * size) == 0 && plan_quads(&w, index)
            ? INDEX_QUADS
            : INDEX_WALK;
    tl_loop_variant_ran(&index_variants[path]);
    const int64_t threads = path == INDEX_ROWS    ? w.n / w.inner * 32
                            : path == INDEX_LINE  ? w.n / w.shape[w.ndim - 1] * INDEX_THREADS
                            : path == INDEX_QUADS ? w.n / 4
                                                  : w.n;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(threads, INDEX_THREADS), at.sm_count);
    const size_t line_bytes = (size_t)(w.size * size);
    return by_element_size(size, [&](auto u) {
        typedef decltype(u) U;
        U *o = (U *)tl_data(out[0]);
        const U *s = (const U *)tl_data(src);
        if (path == INDEX_WALK) {
            gather_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>(o, s, tl_data(index), w);
            return tl_cuda_check_launch(at.op);
        }
        return by_index_type(w, [&](auto i) {
            typedef decltype(i) I;
            const I *x = (const I *)tl_data(index);
            if (path == INDEX_ROWS)
                gather_rows<<<grid, INDEX_THREADS, 0, at.stream>>>(o, s, x, w);
            else if (path == INDEX_LINE)
                gather_line<<<grid, INDEX_THREADS, line_bytes, at.stream>>>(o, s, x, w);
            else
                gather_quads<<<grid, INDEX_THREADS, 0, at.stream>>>(o, s, x, w);
            return tl_cuda_check_launch(at.op);
        });
    });
}

template <typename T>
static tl_status launch_scatter_add(const tl_cuda_where &at, tl_tensor *target,
                                    const tl_tensor *src, const tl_tensor *index, index_walk &w) {
    const int path = plan_line(&w, index, target) ? INDEX_LINE
                     : plan_quads(&w, index)      ? INDEX_QUADS
                                                  : INDEX_WALK;
    tl_loop_variant_ran(&index_variants[path]);
    const int64_t threads = path == INDEX_LINE    ? w.n / w.shape[w.ndim - 1] * INDEX_THREADS
                            : path == INDEX_QUADS ? w.n / 4
                                                  : w.n;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(threads, INDEX_THREADS), at.sm_count);
    T *t = (T *)tl_data(target);
    const T *s = (const T *)tl_data(src);
    if (path == INDEX_WALK) {
        scatter_add_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>(t, s, tl_data(index), w);
        return tl_cuda_check_launch(at.op);
    }
    return by_index_type(w, [&](auto i) {
        typedef decltype(i) I;
        const I *x = (const I *)tl_data(index);
        if (path == INDEX_LINE)
            scatter_add_line<<<grid, INDEX_THREADS, (size_t)w.size * sizeof(T), at.stream>>>(t, s,
                                                                                             x, w);
        else
            scatter_add_quads<<<grid, INDEX_THREADS, 0, at.stream>>>(t, s, x, w);
        return tl_cuda_check_launch(at.op);
    });
}

static tl_status cuda_scatter_add(tl_tensor *const *out, const tl_tensor *const *in,
                                  const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter_add", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    switch (target->dtype) {
    case TL_F32:
        return launch_scatter_add<float>(at, target, src, index, w);
    case TL_F64:
        return launch_scatter_add<double>(at, target, src, index, w);
    case TL_BF16:
        return launch_scatter_add<__nv_bfloat16>(at, target, src, index, w);
    case TL_F16:
        return launch_scatter_add<__half>(at, target, src, index, w);
    case TL_I32:
        return launch_scatter_add<int32_t>(at, target, src, index, w);
    case TL_I64:
        return launch_scatter_add<int64_t>(at, target, src, index, w);
    default:
        return tl_error(TL_ERR_DTYPE, "scatter_add: no CUDA kernel for %s",
                        tl_dtype_name(target->dtype));
    }
}

static tl_status cuda_scatter(tl_tensor *const *out, const tl_tensor *const *in,
                              const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    return by_element_size(tl_dtype_size(target->dtype), [&](auto u) {
        typedef decltype(u) U;
        scatter_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>(
            (U *)tl_data(target), (const U *)tl_data(src), tl_data(index), w);
        return tl_cuda_check_launch(at.op);
    });
}

/* each fold of scatter_reduce is a variant (args->scalar[0]: a tl_scatter_mode) */
static const tl_kernel_variant scatter_reduce_variants[] = {
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "prod", "reduce = \"prod\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amax", "reduce = \"amax\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amin", "reduce = \"amin\""),
};

static tl_status cuda_scatter_reduce(tl_tensor *const *out, const tl_tensor *const *in,
                                     const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    const int mode = (int)args->scalar[0];
    tl_variant_ran(&scatter_reduce_variants[mode - TL_SCATTER_PROD], target->dtype);
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter_reduce", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(
        tl_cuda_dtype_of(target), "scatter_reduce", [&](auto e) {
            typedef decltype(e) E;
            typedef typename E::T T;
            scatter_reduce_kernel<E><<<grid, INDEX_THREADS, 0, at.stream>>>(
                (T *)tl_data(target), (const T *)tl_data(src), tl_data(index), w, mode);
            return tl_cuda_check_launch(at.op);
        });
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(gather, TL_DTYPES_ALL, tensors, cuda_gather),
    TL_KERNEL(scatter_add, TL_DTYPES_NUMERIC, tensors, cuda_scatter_add),
    TL_KERNEL(scatter, TL_DTYPES_ALL, tensors, cuda_scatter),
    TL_KERNEL(scatter_reduce, TL_DTYPES_NUMERIC, tensors, cuda_scatter_reduce),
};

TL_KERNEL_TABLE(tl_cuda_index_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_scatter_reduce_variants, TL_DEVICE_CUDA, scatter_reduce_variants);
TL_VARIANT_TABLE(tl_cuda_index_variants, TL_DEVICE_CUDA, index_variants);
