/* CUDA cast kernels (op `cast`), as cpu/copy.c: dst = src elementwise between all 7x7 dtypes.
   bool = value != 0; float -> int truncates toward zero (NaN -> 0, out of range saturates); to
   bf16/f16 rounds to nearest even once (f64 and int64 sources without double rounding). Same
   dtypes copy bits (a dense copy is a cudaMemcpyAsync), except bool: every bool byte is read as
   byte != 0, so a copy holds only 0 and 1 (as on the CPU). */
#include "kernels/cuda/elementwise.cuh"

/* ---- sources: storage, and the value they load as (float, double or int64) ----------------- */
struct src_f32 {
    static constexpr int dtype = TL_CUDA_F32;
    typedef float storage;
    __device__ static float load(float x) { return x; }
};
struct src_f64 {
    static constexpr int dtype = TL_CUDA_F64;
    typedef double storage;
    __device__ static double load(double x) { return x; }
};
struct src_bf16 {
    static constexpr int dtype = TL_CUDA_BF16;
    typedef uint16_t storage;
    __device__ static float load(uint16_t x) { return tl_dev_bf16_load(x); }
};
struct src_f16 {
    static constexpr int dtype = TL_CUDA_F16;
    typedef uint16_t storage;
    __device__ static float load(uint16_t x) { return tl_dev_f16_load(x); }
};
struct src_i32 {
    static constexpr int dtype = TL_CUDA_I32;
    typedef int32_t storage;
    __device__ static int64_t load(int32_t x) { return x; }
};
struct src_i64 {
    static constexpr int dtype = TL_CUDA_I64;
    typedef int64_t storage;
    __device__ static int64_t load(int64_t x) { return x; }
};
struct src_bool {
    static constexpr int dtype = TL_CUDA_BOOL;
    typedef uint8_t storage;
    __device__ static int64_t load(uint8_t x) { return x != 0; }
};

/* ---- destinations: a loaded value of each kind stored as the dtype ------------------------ */
struct dst_f32 {
    static constexpr int dtype = TL_CUDA_F32;
    typedef float storage;
    __device__ static float from(float v) { return v; }
    __device__ static float from(double v) { return (float)v; }
    __device__ static float from(int64_t v) { return (float)v; }
};
struct dst_f64 {
    static constexpr int dtype = TL_CUDA_F64;
    typedef double storage;
    __device__ static double from(float v) { return (double)v; }
    __device__ static double from(double v) { return v; }
    __device__ static double from(int64_t v) { return (double)v; }
};
struct dst_bf16 {
    static constexpr int dtype = TL_CUDA_BF16;
    typedef uint16_t storage;
    __device__ static uint16_t from(float v) { return tl_dev_bf16_round(v); }
    __device__ static uint16_t from(double v) {
        return tl_dev_bf16_round(tl_dev_double_to_f32_odd(v));
    }
    __device__ static uint16_t from(int64_t v) {
        return tl_dev_bf16_round(tl_dev_i64_to_f32_odd(v));
    }
};
struct dst_f16 {
    static constexpr int dtype = TL_CUDA_F16;
    typedef uint16_t storage;
    __device__ static uint16_t from(float v) { return tl_dev_f16_round(v); }
    __device__ static uint16_t from(double v) {
        return tl_dev_f16_round(tl_dev_double_to_f32_odd(v));
    }
    __device__ static uint16_t from(int64_t v) {
        return tl_dev_f16_round(tl_dev_i64_to_f32_odd(v));
    }
};
struct dst_i32 {
    static constexpr int dtype = TL_CUDA_I32;
    typedef int32_t storage;
    __device__ static int32_t from(float v) { return tl_dev_double_to_i32((double)v); }
    __device__ static int32_t from(double v) { return tl_dev_double_to_i32(v); }
    __device__ static int32_t from(int64_t v) { return (int32_t)(uint32_t)v; } /* wraps */
};
struct dst_i64 {
    static constexpr int dtype = TL_CUDA_I64;
    typedef int64_t storage;
    __device__ static int64_t from(float v) { return tl_dev_double_to_i64((double)v); }
    __device__ static int64_t from(double v) { return tl_dev_double_to_i64(v); }
    __device__ static int64_t from(int64_t v) { return v; }
};
struct dst_bool {
    static constexpr int dtype = TL_CUDA_BOOL;
    typedef uint8_t storage;
    template <class V> __device__ static uint8_t from(V v) { return v != 0; }
};

template <class S, class D> struct cast_fn {
    typedef typename D::storage out_t;
    typedef typename S::storage in_t;
    __device__ out_t operator()(in_t x) const { return D::from(S::load(x)); }
};

template <class T> struct bits_fn {
    typedef T out_t;
    typedef T in_t;
    __device__ T operator()(T x) const { return x; }
};

/* ---- dispatch ---------------------------------------------------------------------------- */
static tl_status no_kernel(const tl_cuda_launch *l) {
    return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype pair", l->op);
}

template <class T> static tl_status copy_bits(const tl_cuda_launch *l) {
    if (l->numel > 0 && l->dense && l->scalar_mask == 0) {
        TL_CUDA_TRY(cudaMemcpyAsync(l->data[0], l->data[1], (size_t)l->numel * sizeof(T),
                                    cudaMemcpyDeviceToDevice, l->stream),
                    l->op, "device to device copy");
        return TL_OK;
    }
    return tl_cuda_elementwise<1>(l, bits_fn<T>{});
}

template <class S, class D> static tl_status cast(const tl_cuda_launch *l) {
    if constexpr (S::dtype == D::dtype)
        return no_kernel(l); /* same dtypes copy bits, handled before */
    else
        return tl_cuda_elementwise<1>(l, cast_fn<S, D>{});
}

template <class S> static tl_status cast_from(int dst_dtype, const tl_cuda_launch *l) {
    switch (dst_dtype) {
    case TL_CUDA_F32:
        return cast<S, dst_f32>(l);
    case TL_CUDA_F64:
        return cast<S, dst_f64>(l);
    case TL_CUDA_BF16:
        return cast<S, dst_bf16>(l);
    case TL_CUDA_F16:
        return cast<S, dst_f16>(l);
    case TL_CUDA_I32:
        return cast<S, dst_i32>(l);
    case TL_CUDA_I64:
        return cast<S, dst_i64>(l);
    case TL_CUDA_BOOL:
        return cast<S, dst_bool>(l);
    default:
        return no_kernel(l);
    }
}

static size_t element_size(int dtype) {
    switch (dtype) {
    case TL_CUDA_F64:
    case TL_CUDA_I64:
        return 8;
    case TL_CUDA_F32:
    case TL_CUDA_I32:
        return 4;
    case TL_CUDA_BF16:
    case TL_CUDA_F16:
        return 2;
    default:
        return 1;
    }
}

extern "C" tl_status tl_cuda_cast_run(int src_dtype, int dst_dtype, const tl_cuda_launch *l) {
    if (src_dtype == TL_CUDA_BOOL && dst_dtype == TL_CUDA_BOOL)
        return tl_cuda_elementwise<1>(l, cast_fn<src_bool, dst_bool>{});
    if (src_dtype == dst_dtype) {
        switch (element_size(src_dtype)) {
        case 8:
            return copy_bits<uint64_t>(l);
        case 4:
            return copy_bits<uint32_t>(l);
        case 2:
            return copy_bits<uint16_t>(l);
        default:
            return copy_bits<uint8_t>(l);
        }
    }
    switch (src_dtype) {
    case TL_CUDA_F32:
        return cast_from<src_f32>(dst_dtype, l);
    case TL_CUDA_F64:
        return cast_from<src_f64>(dst_dtype, l);
    case TL_CUDA_BF16:
        return cast_from<src_bf16>(dst_dtype, l);
    case TL_CUDA_F16:
        return cast_from<src_f16>(dst_dtype, l);
    case TL_CUDA_I32:
        return cast_from<src_i32>(dst_dtype, l);
    case TL_CUDA_I64:
        return cast_from<src_i64>(dst_dtype, l);
    case TL_CUDA_BOOL:
        return cast_from<src_bool>(dst_dtype, l);
    default:
        return no_kernel(l);
    }
}
