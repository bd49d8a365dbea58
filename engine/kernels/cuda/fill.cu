/* CUDA fill kernels and their table, as cpu/fill.c: every element of out (any strides) set to one
   value already converted to out's dtype on the host, for every dtype (by element size). */
#include <string.h>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* dense: 16-byte stores where out is aligned for them */
template <typename T>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    fill_dense(T *out, T value, int64_t n, bool vec_ok) {
    constexpr int V = 16 / sizeof(T);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nvec = vec_ok ? n / V : 0;
    tl_vec<T, V> v;
#pragma unroll
    for (int j = 0; j < V; j++) v.v[j] = value;
    for (int64_t i = tid; i < nvec; i += stride) reinterpret_cast<tl_vec<T, V> *>(out)[i] = v;
    for (int64_t i = nvec * V + tid; i < n; i += stride) out[i] = value;
}

template <typename T>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    fill_strided(T *out, T value, int64_t n, const __grid_constant__ tl_cuda_geometry g) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t off[1];
        tl_offsets_at<1>(g, n, i, off);
        out[off[0]] = value;
    }
}

enum { FILL_DENSE_VECTOR, FILL_DENSE_SCALAR, FILL_STRIDED };
static const tl_kernel_variant fill_variants[] = {
    TL_VARIANT(fill, TL_DTYPES_ALL, "dense_vector",
               "out contiguous and 16-byte aligned: 16-byte stores"),
    TL_VARIANT(fill, TL_DTYPES_ALL, "dense_scalar",
               "out contiguous, not 16-byte aligned: one element per store"),
    TL_VARIANT(fill, TL_DTYPES_ALL, "strided", "out not contiguous: offsets from its strides"),
};

template <typename T>
static tl_status launch_fill(uint64_t bits, const tl_cuda_launch *l, tl_dtype dtype) {
    if (l->numel == 0) return TL_OK;
    T value;
    memcpy(&value, &bits, sizeof value);
    T *out = (T *)l->data[0];
    if (l->dense) {
        constexpr int V = 16 / sizeof(T);
        bool vec_ok = tl_cuda_aligned(out, 16);
        int64_t work = vec_ok ? (l->numel + V - 1) / V : l->numel;
        tl_variant_ran(&fill_variants[vec_ok ? FILL_DENSE_VECTOR : FILL_DENSE_SCALAR], dtype);
        fill_dense<T><<<tl_cuda_blocks(work, l->sm_count), TL_CUDA_THREADS, 0, l->stream>>>(
            out, value, l->numel, vec_ok);
    } else {
        tl_variant_ran(&fill_variants[FILL_STRIDED], dtype);
        fill_strided<T><<<tl_cuda_blocks(l->numel, l->sm_count), TL_CUDA_THREADS, 0, l->stream>>>(
            out, value, l->numel, l->geometry);
    }
    return tl_cuda_check_launch(l->op);
}

/* The value converted once on the host (tl_dtype_store, as the CPU kernel), then set as bits of
   its size. */
static tl_status cuda_fill(tl_tensor *out, tl_scalar value) {
    if (tl_numel(out) == 0) return TL_OK;
    uint64_t bits = 0;
    tl_dtype_store(out->dtype, &bits, value);
    /* an expanded out holds each element once: walk it without its 0-stride dims */
    tl_tensor view = *out;
    for (int d = 0; d < view.ndim; d++)
        if (view.strides[d] == 0) view.shape[d] = 1;
    const tl_tensor *operands[] = {&view};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(TL_OP_fill, 1, operands, &l));
    switch (tl_dtype_size(out->dtype)) {
    case 1:
        return launch_fill<uint8_t>(bits, &l, out->dtype);
    case 2:
        return launch_fill<uint16_t>(bits, &l, out->dtype);
    case 4:
        return launch_fill<uint32_t>(bits, &l, out->dtype);
    case 8:
        return launch_fill<uint64_t>(bits, &l, out->dtype);
    default:
        return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l.op);
    }
}

static const tl_kernel_entry entries[] = {TL_KERNEL(fill, TL_DTYPES_ALL, fill, cuda_fill)};

TL_KERNEL_TABLE(tl_cuda_fill_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_fill_variants, TL_DEVICE_CUDA, fill_variants);
