/* CUDA where kernels and their table, as cpu/where.c: out = cond ? a : b, cond bool, a/b/out of one
   dtype. Only the element size matters, so dtypes of one size share a kernel. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* dense operands; bit k of scalar_mask: operand k (1 cond, 2 a, 3 b) is one element. V elements
   a thread (4 where every dense operand is aligned for it: one 4-byte load of cond, vector loads
   of a and b), the last n % V one a thread. */
template <typename T, int V> struct where_vec { T v[V]; };
template <typename T, int V>
__device__ __forceinline__ where_vec<T, V> load_or_splat(const T *p, bool scalar, int64_t i) {
    where_vec<T, V> r;
    if (scalar) {
#pragma unroll
        for (int j = 0; j < V; j++) r.v[j] = p[0];
    } else {
        r = *(const where_vec<T, V> *)(p + i); /* aligned: one access */
    }
    return r;
}
template <typename T, int V>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    where_dense(T *__restrict__ out, const uint8_t *__restrict__ cond, const T *__restrict__ a,
                const T *__restrict__ b, uint32_t scalar_mask, int64_t n) {
    const bool sc = (scalar_mask >> 1) & 1u, sa = (scalar_mask >> 2) & 1u,
               sb = (scalar_mask >> 3) & 1u;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x,
                  first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t groups = n / V;
    for (int64_t g = first; g < groups; g += stride) {
        const int64_t i = g * V;
        const where_vec<uint8_t, V> c = load_or_splat<uint8_t, V>(cond, sc, i);
        const where_vec<T, V> x = load_or_splat<T, V>(a, sa, i), y = load_or_splat<T, V>(b, sb, i);
        where_vec<T, V> r;
#pragma unroll
        for (int j = 0; j < V; j++) r.v[j] = c.v[j] ? x.v[j] : y.v[j];
        *(where_vec<T, V> *)(out + i) = r;
    }
    for (int64_t i = groups * V + first; i < n; i += stride)
        out[i] = cond[sc ? 0 : i] ? a[sa ? 0 : i] : b[sb ? 0 : i];
}

template <typename T>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    where_strided(T *out, const uint8_t *cond, const T *a, const T *b, int64_t n,
                  const __grid_constant__ tl_cuda_geometry g) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t off[4];
        tl_offsets_at<4>(g, n, i, off);
        out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
    }
}

template <typename T> static tl_status launch_where(const tl_cuda_launch *l) {
    if (l->numel == 0) return TL_OK;
    T *out = (T *)l->data[0];
    const uint8_t *cond = (const uint8_t *)l->data[1];
    const T *a = (const T *)l->data[2], *b = (const T *)l->data[3];
    unsigned blocks = tl_cuda_blocks(l->numel, l->sm_count);
    /* 4 a thread where the dense operands are aligned to 4 elements */
    const bool aligned = ((uintptr_t)out | (uintptr_t)a * !((l->scalar_mask >> 2) & 1u) |
                          (uintptr_t)b * !((l->scalar_mask >> 3) & 1u)) %
                                 (4 * sizeof(T)) ==
                             0 &&
                         (uintptr_t)cond * !((l->scalar_mask >> 1) & 1u) % 4 == 0;
    if (l->dense && aligned)
        where_dense<T, 4>
            <<<tl_cuda_blocks((l->numel + 3) / 4, l->sm_count), TL_CUDA_THREADS, 0, l->stream>>>(
                out, cond, a, b, l->scalar_mask, l->numel);
    else if (l->dense)
        where_dense<T, 1>
            <<<blocks, TL_CUDA_THREADS, 0, l->stream>>>(out, cond, a, b, l->scalar_mask, l->numel);
    else
        where_strided<T>
            <<<blocks, TL_CUDA_THREADS, 0, l->stream>>>(out, cond, a, b, l->numel, l->geometry);
    return tl_cuda_check_launch(l->op);
}

/* One kernel for every dtype: only the element size matters. */
static tl_status cuda_where(tl_tensor *out, const tl_tensor *cond, const tl_tensor *a,
                            const tl_tensor *b) {
    const tl_tensor *operands[] = {out, cond, a, b};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(TL_OP_where, 4, operands, &l));
    switch (tl_dtype_size(out->dtype)) {
    case 1:
        return launch_where<uint8_t>(&l);
    case 2:
        return launch_where<uint16_t>(&l);
    case 4:
        return launch_where<uint32_t>(&l);
    case 8:
        return launch_where<uint64_t>(&l);
    default:
        return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l.op);
    }
}

static const tl_kernel_entry entries[] = {TL_KERNEL(where, TL_DTYPES_ALL, ternary, cuda_where)};

TL_KERNEL_TABLE(tl_cuda_where_table, TL_DEVICE_CUDA, entries);
