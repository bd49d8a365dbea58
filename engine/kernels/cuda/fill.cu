/* CUDA fill kernels, as cpu/fill.c: every element of out (any strides) set to one value already
   converted to out's dtype on the host, for every dtype (by element size). */
#include <string.h>

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

template <typename T> static tl_status run(uint64_t bits, const tl_cuda_launch *l) {
    if (l->numel == 0) return TL_OK;
    T value;
    memcpy(&value, &bits, sizeof value);
    T *out = (T *)l->data[0];
    if (l->dense) {
        constexpr int V = 16 / sizeof(T);
        bool vec_ok = tl_cuda_aligned(out, 16);
        int64_t work = vec_ok ? (l->numel + V - 1) / V : l->numel;
        fill_dense<T><<<tl_cuda_blocks(work, l->sm_count), TL_CUDA_THREADS, 0, l->stream>>>(
            out, value, l->numel, vec_ok);
    } else {
        fill_strided<T><<<tl_cuda_blocks(l->numel, l->sm_count), TL_CUDA_THREADS, 0, l->stream>>>(
            out, value, l->numel, l->geometry);
    }
    return tl_cuda_check_launch(l->op);
}

extern "C" tl_status tl_cuda_fill_run(size_t element_size, uint64_t bits, const tl_cuda_launch *l) {
    switch (element_size) {
    case 1:
        return run<uint8_t>(bits, l);
    case 2:
        return run<uint16_t>(bits, l);
    case 4:
        return run<uint32_t>(bits, l);
    case 8:
        return run<uint64_t>(bits, l);
    default:
        return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l->op);
    }
}
