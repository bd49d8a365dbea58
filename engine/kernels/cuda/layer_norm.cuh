/* CUDA layer norm, shared by its forward (layer_norm.cu) and backward (layer_norm_backward.cu):
   the description of a call, the row operands that may be in a 16-bit type over a float32
   stream (mixed precision, kernels/kernel.h), and the dispatch over those types. */
#ifndef TLUA_KERNELS_CUDA_LAYER_NORM_CUH
#define TLUA_KERNELS_CUDA_LAYER_NORM_CUH

#include <type_traits>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define LN_THREADS 256

/* rows of D elements; mean/rstd float32 (float64 for float64). The stream's operands (in, sum,
   weight, bias, grad_sum, the input's gradient) are in dtype; residual, out (the forward's) and
   grad_out, grad_residual (the backward's) in branch where their flag says so. */
typedef struct tl_cuda_layer_norm {
    tl_cuda_where at;
    int dtype;
    int branch; /* the 16-bit type of the flagged operands (TL_CUDA_BF16/F16), else dtype */
    bool residual_branch, out_branch, grad_out_branch, grad_residual_branch;
    int64_t rows, D;
    double eps;
    const void *in, *weight, *bias, *grad_out; /* weight, bias may be NULL */
    const void *residual, *grad_sum;           /* add_layer_norm's; may be NULL */
    void *out;                                 /* forward output or grad_in */
    void *grad_residual;                       /* grad_in in branch; may be NULL */
    void *sum;                                 /* add_layer_norm's in + residual */
    void *mean, *rstd;                         /* written by the forward, read by the backward */
    void *grad_weight, *grad_bias;             /* may be NULL */
} tl_cuda_layer_norm;

/* The threads a row takes in the kernels by rows: a warp, or the block for long rows. */
static inline int tl_layer_norm_row_group(int64_t D) {
    return D >= 1024 ? LN_THREADS : 32;
}

/* The machine word of N bytes, what a vector load or store of N bytes moves. */
template <int N> struct tl_ln_word;
template <> struct tl_ln_word<16> { typedef uint4 type; };
template <> struct tl_ln_word<8> { typedef uint2 type; };
template <> struct tl_ln_word<4> { typedef uint32_t type; };

/* A row operand (residual, out, grad_out, the residual's gradient) in the stream's element type E
   or, when branch, in the 16-bit type B: loads widen exactly to E's compute type, stores round
   once from it. B is E when the call has no 16-bit operand. */
template <class E, class B> struct tl_ln_operand {
    typedef typename E::C C;
    void *p;
    bool branch;

    __device__ __forceinline__ C load(int64_t i) const {
        return branch ? (C)B::load(((const typename B::T *)p)[i])
                      : E::load(((const typename E::T *)p)[i]);
    }
    __device__ __forceinline__ void store(int64_t i, C v) const {
        if (branch)
            ((typename B::T *)p)[i] = B::store(v);
        else
            ((typename E::T *)p)[i] = E::store(v);
    }
    /* elements i .. i + W - 1 (i a multiple of W: one aligned vector of either type) */
    template <int W> __device__ __forceinline__ void load_vector(int64_t i, C (&v)[W]) const {
        if (branch)
            load_as<B>(i, v);
        else
            load_as<E>(i, v);
    }
    template <int W>
    __device__ __forceinline__ void store_vector(int64_t i, const C (&v)[W]) const {
        if (branch)
            store_as<B>(i, v);
        else
            store_as<E>(i, v);
    }

  private:
    template <class X, int W> __device__ __forceinline__ void load_as(int64_t i, C (&v)[W]) const {
        typedef typename X::T T;
        typedef typename tl_ln_word<(int)(W * sizeof(T))>::type Word;
        const Word bits = *((const Word *)((const T *)p + i));
        T e[W];
        memcpy(e, &bits, sizeof bits);
#pragma unroll
        for (int w = 0; w < W; w++) v[w] = (C)X::load(e[w]);
    }
    template <class X, int W>
    __device__ __forceinline__ void store_as(int64_t i, const C (&v)[W]) const {
        typedef typename X::T T;
        typedef typename tl_ln_word<(int)(W * sizeof(T))>::type Word;
        T e[W];
#pragma unroll
        for (int w = 0; w < W; w++) e[w] = X::store(v[w]);
        Word bits;
        memcpy(&bits, e, sizeof bits);
        *((Word *)((T *)p + i)) = bits;
    }
};

/* Row operand p of a call, in branch when flagged. */
template <class E, class B>
__host__ __device__ static tl_ln_operand<E, B> tl_ln_row(const void *p, bool branch) {
    return tl_ln_operand<E, B>{const_cast<void *>(p), branch};
}

/* Calls body(E, B) for l's types: E the stream's element (l->dtype), B l's 16-bit branch type
   over a float32 stream, else E. */
template <typename F> static tl_status tl_layer_norm_types(const tl_cuda_layer_norm *l, F body) {
    return tl_cuda_floating(l->dtype, l->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        if constexpr (std::is_same<E, tl_elem<TL_CUDA_F32>>::value) {
            if (l->branch == TL_CUDA_BF16) return body(e, tl_elem<TL_CUDA_BF16>());
            if (l->branch == TL_CUDA_F16) return body(e, tl_elem<TL_CUDA_F16>());
        }
        return body(e, e);
    });
}

/* The description of t's rows (of its last dim's D elements each): dtype, rows and D set, no
   operand in a branch type. */
static inline tl_cuda_layer_norm tl_layer_norm_rows_of(const tl_tensor *t) {
    const int64_t D = t->shape[t->ndim - 1];
    tl_cuda_layer_norm l{};
    l.dtype = tl_cuda_dtype_of(t);
    l.branch = l.dtype;
    l.rows = D > 0 ? tl_numel(t) / D : 0;
    l.D = D;
    return l;
}

/* Marks operand t (may be NULL) of l as in the branch type when its dtype is not the stream's. */
static inline bool tl_layer_norm_branch(tl_cuda_layer_norm *l, const tl_tensor *t) {
    if (!t || tl_cuda_dtype_of(t) == l->dtype) return false;
    l->branch = tl_cuda_dtype_of(t);
    return true;
}

/* Whether l's rows take the vector kernels, and their NV (16-byte vectors of the stream's type a
   lane: 1, 2, 4, 6 or 8): every pointer 16-byte aligned and a row whole vectors. */
bool tl_layer_norm_vector_rows(const tl_cuda_layer_norm *l, int *nv);

#endif
