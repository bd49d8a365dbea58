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
    TL_VARIANT(cast, TL_DTYPES_NUMERIC, "pitched",
               "same dtype (not bool), both rows of contiguous elements (a narrow along the last "
               "dim, as cat writes): a block copies each row, by 16-byte vectors where aligned"),
};

/* dst row r = src row r, rows pitch apart in each (in elements), cols elements each: a block
   per row, 16-byte vectors where the rows and pitches are aligned to them (vectors) */
template <typename T>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    copy_pitched(T *__restrict__ dst, int64_t dst_pitch, const T *__restrict__ src,
                 int64_t src_pitch, int64_t cols, int64_t rows, bool vectors) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        T *to = dst + r * dst_pitch;
        const T *from = src + r * src_pitch;
        if (vectors) {
            const int64_t n = cols * (int64_t)sizeof(T) / 16;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
                ((uint4 *)to)[k] = ((const uint4 *)from)[k];
        } else {
            for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) to[k] = from[k];
        }
    }
}

/* rows of contiguous elements in both: the merged geometry is [rows, cols] with unit-stride
   columns and row pitches of at least a row (no overlap) */
static bool pitched_rows(const tl_cuda_launch *l) {
    const tl_cuda_geometry &g = l->geometry;
    return l->numel > 0 && !l->dense && l->scalar_mask == 0 && g.ndim == 2 &&
           g.strides[0][1] == 1 && g.strides[1][1] == 1 && g.strides[0][0] >= g.shape[1] &&
           g.strides[1][0] >= g.shape[1];
}

template <class T> static tl_status launch_copy_bits(const tl_cuda_launch *l) {
    if (l->numel > 0 && l->dense && l->scalar_mask == 0) {
        tl_loop_variant_ran(&copy_variants[0]); /* for the dtype of this cast kernel */
        TL_CUDA_TRY(cudaMemcpyAsync(l->data[0], l->data[1], (size_t)l->numel * sizeof(T),
                                    cudaMemcpyDeviceToDevice, l->stream),
                    l->op, "device to device copy");
        return TL_OK;
    }
    if (pitched_rows(l)) {
        tl_loop_variant_ran(&copy_variants[1]);
        const tl_cuda_geometry &g = l->geometry;
        const bool vectors = ((uintptr_t)l->data[0] | (uintptr_t)l->data[1]) % 16 == 0 &&
                             (g.strides[0][0] * sizeof(T)) % 16 == 0 &&
                             (g.strides[1][0] * sizeof(T)) % 16 == 0 &&
                             (g.shape[1] * sizeof(T)) % 16 == 0;
        const unsigned grid = (unsigned)(g.shape[0] < 65536 ? g.shape[0] : 65536);
        copy_pitched<T><<<grid, TL_CUDA_THREADS, 0, l->stream>>>(
            (T *)l->data[0], g.strides[0][0], (const T *)l->data[1], g.strides[1][0], g.shape[1],
            g.shape[0], vectors);
        return tl_cuda_check_launch(l->op);
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
