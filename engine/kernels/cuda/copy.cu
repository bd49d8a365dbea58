/* CUDA cast kernels (op `cast`) and their table, as cpu/copy.c: dst = src elementwise between all
   7x7 dtypes. bool = value != 0; float -> int truncates toward zero (NaN -> 0, out of range
   saturates); to bf16/f16 rounds to nearest even once (f64 and int64 sources without double
   rounding). Same dtypes copy bits (a dense copy is a cudaMemcpyAsync), except bool: every bool
   byte is read as byte != 0, so a copy holds only 0 and 1 (as on the CPU). */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* dst = D::cast(S::value(x)): the source loaded as its kind (float, double or int64), stored as
   the destination (tl_elem of kernels/cuda/dtype.cuh: the CPU's conversions, core/half.h) */
template <class S, class D> struct cast_fn {
    typedef typename D::T out_t;
    typedef typename S::T in_t;
    __device__ out_t operator()(in_t x) const { return D::cast(S::value(x)); }
};

template <class T> struct bits_fn {
    typedef T out_t;
    typedef T in_t;
    __device__ T operator()(T x) const { return x; }
};

/* ---- dispatch ---------------------------------------------------------------------------- */
static const tl_kernel_variant copy_variants[] = {
    TL_VARIANT(cast, TL_DTYPES_NUMERIC, "memcpy",
               "same dtype (not bool), both contiguous: a device to device cudaMemcpyAsync"),
};

template <class T> static tl_status launch_copy_bits(const tl_cuda_launch *l) {
    if (l->numel > 0 && l->dense && l->scalar_mask == 0) {
        tl_loop_variant_ran(&copy_variants[0]); /* for the dtype of this cast kernel */
        TL_CUDA_TRY(cudaMemcpyAsync(l->data[0], l->data[1], (size_t)l->numel * sizeof(T),
                                    cudaMemcpyDeviceToDevice, l->stream),
                    l->op, "device to device copy");
        return TL_OK;
    }
    return tl_cuda_elementwise<1>(l, bits_fn<T>{});
}

/* One kernel for every pair of dtypes, looked up by src's. */
static tl_status cuda_cast(tl_tensor *dst, const tl_tensor *src) {
    const tl_tensor *operands[] = {dst, src};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(TL_OP_cast, 2, operands, &l));
    const int src_dtype = tl_cuda_dtype_of(src), dst_dtype = tl_cuda_dtype_of(dst);
    if (src_dtype == dst_dtype && src_dtype != TL_CUDA_BOOL) {
        return tl_cuda_dispatch<TL_CUDA_NUMERIC>(src_dtype, l.op, [&](auto s) -> tl_status {
            return launch_copy_bits<typename decltype(s)::T>(&l);
        });
    }
    return tl_cuda_dispatch<TL_CUDA_ALL>(src_dtype, l.op, [&](auto s) -> tl_status {
        return tl_cuda_dispatch<TL_CUDA_ALL>(dst_dtype, l.op, [&](auto d) -> tl_status {
            return tl_cuda_elementwise<1>(&l, cast_fn<decltype(s), decltype(d)>{});
        });
    });
}

static const tl_kernel_entry entries[] = {TL_KERNEL(cast, TL_DTYPES_ALL, copy, cuda_cast)};

TL_KERNEL_TABLE(tl_cuda_copy_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_copy_variants, TL_DEVICE_CUDA, copy_variants);
