/* Internal: the one dtype-trait family of the CUDA kernels (tl_elem<D>: storage, compute and wide
   types, loads, stores and casts, conversions from core/half.h) and the one dtype dispatch
   (tl_cuda_dispatch<Set>(dtype, op, [&](auto e) {...})) every .cu file uses. */
#ifndef TLUA_CUDA_DTYPE_CUH
#define TLUA_CUDA_DTYPE_CUH

#include <stdint.h>

#include "core/half.h"
#include "kernels/cuda/launch.h"

/* Per dtype D:
     T  storage;  C  compute type (float for f32/bf16/f16, double, int32, int64, int for bool);
     V  wide type of reductions and random values (double for floating dtypes, int64 otherwise);
     K  the kind a cast loads (float for f32/bf16/f16, double, int64 for integers and bool);
     load(T) -> C, store(C) -> T (rounded to nearest even for bf16/f16);
     wide(T) -> V, from_wide(V) -> T (a double is rounded to float first, as the CPU's cast);
     value(T) -> K, cast(float | double | int64) -> T: the cast kernels' conversions (one rounding
     to bf16/f16, float -> integer truncated and saturated, integers wrapped, bool = v != 0). */
template <int D> struct tl_elem;

template <> struct tl_elem<TL_CUDA_F32> {
    static constexpr int dtype = TL_CUDA_F32;
    typedef float T, C, K;
    typedef double V;
    __device__ static float load(float x) { return x; }
    __device__ static float store(float x) { return x; }
    __device__ static double wide(float x) { return x; }
    __device__ static float from_wide(double v) { return (float)v; }
    __device__ static float value(float x) { return x; }
    __device__ static float cast(float v) { return v; }
    __device__ static float cast(double v) { return (float)v; }
    __device__ static float cast(int64_t v) { return (float)v; }
};
template <> struct tl_elem<TL_CUDA_F64> {
    static constexpr int dtype = TL_CUDA_F64;
    typedef double T, C, V, K;
    __device__ static double load(double x) { return x; }
    __device__ static double store(double x) { return x; }
    __device__ static double wide(double x) { return x; }
    __device__ static double from_wide(double v) { return v; }
    __device__ static double value(double x) { return x; }
    __device__ static double cast(float v) { return v; }
    __device__ static double cast(double v) { return v; }
    __device__ static double cast(int64_t v) { return (double)v; }
};
/* bf16 and f16: the same but for the two conversions */
struct tl_bf16_bits {
    __device__ static float load(uint16_t h) { return tl_bf16_load(h); }
    __device__ static uint16_t round(float f) { return tl_bf16_round(f); }
};
struct tl_f16_bits {
    __device__ static float load(uint16_t h) { return tl_f16_load(h); }
    __device__ static uint16_t round(float f) { return tl_f16_round(f); }
};
template <class H, int D> struct tl_elem_half {
    static constexpr int dtype = D;
    typedef uint16_t T;
    typedef float C, K;
    typedef double V;
    __device__ static float load(uint16_t x) { return H::load(x); }
    __device__ static uint16_t store(float x) { return H::round(x); }
    __device__ static double wide(uint16_t x) { return H::load(x); }
    __device__ static uint16_t from_wide(double v) { return H::round((float)v); }
    __device__ static float value(uint16_t x) { return H::load(x); }
    __device__ static uint16_t cast(float v) { return H::round(v); }
    __device__ static uint16_t cast(double v) { return H::round(tl_double_to_f32_odd(v)); }
    __device__ static uint16_t cast(int64_t v) { return H::round(tl_i64_to_f32_odd(v)); }
};
template <> struct tl_elem<TL_CUDA_BF16> : tl_elem_half<tl_bf16_bits, TL_CUDA_BF16> {};
template <> struct tl_elem<TL_CUDA_F16> : tl_elem_half<tl_f16_bits, TL_CUDA_F16> {};
/* int32 and int64: wrapping arithmetic is the math's (kernels/elementwise_math.h) */
template <typename I, int D> struct tl_elem_int {
    static constexpr int dtype = D;
    typedef I T, C;
    typedef int64_t V, K;
    __device__ static I load(I x) { return x; }
    __device__ static I store(I x) { return x; }
    __device__ static int64_t wide(I x) { return x; }
    __device__ static I from_wide(int64_t v) { return (I)v; }
    __device__ static int64_t value(I x) { return x; }
    __device__ static I cast(float v) { return cast((double)v); }
    __device__ static I cast(double v) {
        if constexpr (sizeof(I) == 4)
            return tl_double_to_i32(v);
        else
            return tl_double_to_i64(v);
    }
    __device__ static I cast(int64_t v) { return (I)(uint64_t)v; } /* wraps */
};
template <> struct tl_elem<TL_CUDA_I32> : tl_elem_int<int32_t, TL_CUDA_I32> {};
template <> struct tl_elem<TL_CUDA_I64> : tl_elem_int<int64_t, TL_CUDA_I64> {};
template <> struct tl_elem<TL_CUDA_BOOL> {
    static constexpr int dtype = TL_CUDA_BOOL;
    typedef uint8_t T;
    typedef int C;
    typedef int64_t V, K;
    __device__ static int load(uint8_t x) { return x != 0; }
    __device__ static uint8_t store(int x) { return x != 0; }
    __device__ static int64_t wide(uint8_t x) { return x != 0; }
    __device__ static uint8_t from_wide(int64_t v) { return v != 0; }
    __device__ static int64_t value(uint8_t x) { return x != 0; }
    template <class W> __device__ static uint8_t cast(W v) { return v != 0; }
};

/* dtype sets, bits of TL_CUDA_* (as kernels/kernel.h's TL_DTYPES_* for tl_dtype) */
enum : unsigned {
    TL_CUDA_FLOATING =
        1u << TL_CUDA_F32 | 1u << TL_CUDA_F64 | 1u << TL_CUDA_BF16 | 1u << TL_CUDA_F16,
    TL_CUDA_INTEGER = 1u << TL_CUDA_I32 | 1u << TL_CUDA_I64,
    TL_CUDA_NUMERIC = TL_CUDA_FLOATING | TL_CUDA_INTEGER,
    TL_CUDA_ALL = TL_CUDA_NUMERIC | 1u << TL_CUDA_BOOL,
};

static inline tl_status tl_cuda_no_kernel(const char *op) {
    return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", op);
}

template <unsigned Set, int D, typename F>
static tl_status tl_cuda_dispatch_one(const char *op, F &body) {
    if constexpr (((Set >> D) & 1u) != 0)
        return body(tl_elem<D>());
    else
        return tl_cuda_no_kernel(op);
}

/* Calls body(tl_elem<dtype>()) (a generic lambda: [&](auto e) { typedef decltype(e) E; ... }),
   instantiated only for the dtypes of Set; other dtypes give an error naming op. */
template <unsigned Set, typename F>
static tl_status tl_cuda_dispatch(int dtype, const char *op, F body) {
    switch (dtype) {
    case TL_CUDA_F32:
        return tl_cuda_dispatch_one<Set, TL_CUDA_F32>(op, body);
    case TL_CUDA_F64:
        return tl_cuda_dispatch_one<Set, TL_CUDA_F64>(op, body);
    case TL_CUDA_BF16:
        return tl_cuda_dispatch_one<Set, TL_CUDA_BF16>(op, body);
    case TL_CUDA_F16:
        return tl_cuda_dispatch_one<Set, TL_CUDA_F16>(op, body);
    case TL_CUDA_I32:
        return tl_cuda_dispatch_one<Set, TL_CUDA_I32>(op, body);
    case TL_CUDA_I64:
        return tl_cuda_dispatch_one<Set, TL_CUDA_I64>(op, body);
    case TL_CUDA_BOOL:
        return tl_cuda_dispatch_one<Set, TL_CUDA_BOOL>(op, body);
    default:
        return tl_cuda_no_kernel(op);
    }
}

/* The floating dtypes only (the nn, softmax, reduction helpers' common case). */
template <typename F> static tl_status tl_cuda_floating(int dtype, const char *op, F body) {
    return tl_cuda_dispatch<TL_CUDA_FLOATING>(dtype, op, body);
}

#endif
