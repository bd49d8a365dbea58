/* CUDA embedding and its backward with their table, the dtypes of cpu/embedding.c: a row gather,
   and a deterministic backward: the indices are sorted (stable, with their positions), then each
   run of equal indices is summed in position order, as cpu/embedding.c sums it, into its row (rows
   no index names stay zero). */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define EMBED_THREADS 256
#define SEG_X         32 /* columns per block of the segment sums */
#define SEG_Y         8  /* sorted positions per block */

/* out row i = src row indices[i], in units U (a row is `units` of them); zeros for an index
   outside [0, rows), which the queued index check reports. */
template <typename U, typename I>
__global__ void __launch_bounds__(EMBED_THREADS)
    gather_kernel(U *out, const U *src, const I *indices, int64_t n, int64_t rows, int64_t units) {
    const int64_t total = n * units, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t i = e / units, u = e - i * units, row = (int64_t)indices[i];
        U zero;
        memset(&zero, 0, sizeof zero);
        out[e] = row >= 0 && row < rows ? src[row * units + u] : zero;
    }
}

template <typename I>
static void launch_gather(const tl_cuda_where *at, void *out, const void *src, const I *indices,
                          int64_t n, int64_t rows, int64_t row_bytes) {
    /* the widest unit that divides the row and both base addresses */
    const uintptr_t bits = (uintptr_t)out | (uintptr_t)src | (uintptr_t)row_bytes;
    const int unit = bits % 16 == 0 ? 16 : bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : 2;
    const int64_t units = row_bytes / unit;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(n * units, EMBED_THREADS), at->sm_count);
    switch (unit) {
    case 16:
        gather_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>((uint4 *)out, (const uint4 *)src,
                                                              indices, n, rows, units);
        break;
    case 8:
        gather_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>((uint2 *)out, (const uint2 *)src,
                                                              indices, n, rows, units);
        break;
    case 4:
        gather_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>(
            (uint32_t *)out, (const uint32_t *)src, indices, n, rows, units);
        break;
    default:
        gather_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>(
            (uint16_t *)out, (const uint16_t *)src, indices, n, rows, units);
        break;
    }
}

static int element_size(int dtype) {
    return dtype == TL_CUDA_F64 ? 8 : dtype == TL_CUDA_F32 ? 4 : 2;
}

/* indices (n, int32 or int64 by index_dtype) into the `rows` rows of D elements of src; an index
   outside [0, rows) gives a zero row */
static tl_status launch_embedding(const tl_cuda_where *at, int dtype, void *out, const void *src,
                                  const void *indices, int index_dtype, int64_t n, int64_t rows,
                                  int64_t D) {
    const int64_t row_bytes = D * element_size(dtype);
    if (index_dtype == TL_CUDA_I64)
        launch_gather(at, out, src, (const int64_t *)indices, n, rows, row_bytes);
    else
        launch_gather(at, out, src, (const int32_t *)indices, n, rows, row_bytes);
    return tl_cuda_check_launch(at->op);
}

/* keys = the indices widened, values = their positions; an index outside [0, rows) becomes
   rows, so such indices sort last, together, and add nowhere */
template <typename I>
__global__ void __launch_bounds__(EMBED_THREADS)
    keys_kernel(uint64_t *keys, int64_t *positions, const I *indices, int64_t n, int64_t rows) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t row = (int64_t)indices[i];
        keys[i] = (uint64_t)(row >= 0 && row < rows ? row : rows);
        positions[i] = i;
    }
}

/* A thread (sorted position i, column d) where a run of equal keys starts sums the run's rows
   of src at column d, in position order, into out's row of that key. */
template <class E, typename A>
__global__ void __launch_bounds__(SEG_X *SEG_Y)
    segment_sum_kernel(typename E::T *out, const typename E::T *src, const uint64_t *keys,
                       const int64_t *positions, int64_t n, int64_t rows, int64_t D) {
    const int64_t d0 = (int64_t)blockIdx.y * SEG_X + threadIdx.x;
    for (int64_t base = (int64_t)blockIdx.x * SEG_Y; base < n; base += (int64_t)gridDim.x * SEG_Y) {
        const int64_t i = base + threadIdx.y;
        if (i >= n || (i > 0 && keys[i] == keys[i - 1])) continue;
        const uint64_t key = keys[i];
        if (key >= (uint64_t)rows) continue; /* the out-of-range indices (see keys_kernel) */
        for (int64_t d = d0; d < D; d += (int64_t)gridDim.y * SEG_X) {
            A acc = A(0);
            for (int64_t k = i; k < n && keys[k] == key; k++)
                acc = acc + (A)E::load(src[positions[k] * D + d]);
            out[(int64_t)key * D + d] = E::store(acc);
        }
    }
}

static int key_bits(int64_t rows) {
    int bits = 1;
    while (bits < 63 && ((int64_t)1 << bits) < rows) bits++;
    return bits;
}

/* out [rows, D] = the rows of src [n, D] summed by index, in order (an index outside [0, rows)
   adds nowhere) */
static tl_status launch_embedding_backward(const tl_cuda_where *at, int dtype, void *out,
                                           const void *src, const void *indices, int index_dtype,
                                           int64_t n, int64_t rows, int64_t D) {
    TL_CUDA_TRY(cudaMemsetAsync(out, 0, (size_t)(rows * D * element_size(dtype)), at->stream),
                at->op, "zeroing the gradient");
    if (n == 0) return TL_OK;
    /* scratch: keys and positions, unsorted and sorted, then CUB's temporary storage */
    size_t temp_bytes = 0;
    TL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const uint64_t *)nullptr,
                                                (uint64_t *)nullptr, (const int64_t *)nullptr,
                                                (int64_t *)nullptr, n, 0, key_bits(rows + 1),
                                                at->stream),
                at->op, "sizing the index sort");
    const size_t array = ((size_t)n * 8 + 255) / 256 * 256;
    tl_cuda_scratch scratch;
    TL_TRY(scratch.get(*at, 4 * array + temp_bytes));
    char *base = (char *)scratch.ptr;
    uint64_t *keys_in = (uint64_t *)base, *keys = (uint64_t *)(base + array);
    int64_t *positions_in = (int64_t *)(base + 2 * array),
            *positions = (int64_t *)(base + 3 * array);
    const unsigned grid = tl_cuda_grid(tl_ceil_div(n, EMBED_THREADS), at->sm_count);
    if (index_dtype == TL_CUDA_I64)
        keys_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>(keys_in, positions_in,
                                                            (const int64_t *)indices, n, rows);
    else
        keys_kernel<<<grid, EMBED_THREADS, 0, at->stream>>>(keys_in, positions_in,
                                                            (const int32_t *)indices, n, rows);
    TL_TRY(tl_cuda_check_launch(at->op));
    TL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(base + 4 * array, temp_bytes, keys_in, keys,
                                                positions_in, positions, n, 0, key_bits(rows + 1),
                                                at->stream),
                at->op, "sorting the indices");
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const int64_t tiles = tl_ceil_div(D, SEG_X);
        const dim3 grid2((unsigned)tl_cuda_grid(tl_ceil_div(n, SEG_Y), at->sm_count, 64),
                         (unsigned)(tiles < 65535 ? tiles : 65535));
        segment_sum_kernel<E, typename E::C><<<grid2, dim3(SEG_X, SEG_Y), 0, at->stream>>>(
            (T *)out, (const T *)src, keys, positions, n, rows, D);
        return tl_cuda_check_launch(at->op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_embedding(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    const int64_t n = tl_numel(indices), D = src->shape[1];
    if (n == 0 || D == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, "embedding", &at));
    return launch_embedding(&at, tl_cuda_dtype_of(src), tl_data(out), tl_data(src),
                            tl_data(indices), tl_cuda_dtype_of(indices), n, src->shape[0], D);
}

static tl_status cuda_embedding_backward(tl_tensor *out, const tl_tensor *src,
                                         const tl_tensor *indices) {
    const int64_t n = tl_numel(indices), rows = out->shape[0], D = out->shape[1];
    if (rows == 0 || D == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, "embedding_backward", &at));
    return launch_embedding_backward(&at, tl_cuda_dtype_of(src), tl_data(out), tl_data(src),
                                     tl_data(indices), tl_cuda_dtype_of(indices), n, rows, D);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(embedding, TL_DTYPES_FLOATING, embedding, cuda_embedding),
    TL_KERNEL(embedding_backward, TL_DTYPES_FLOATING, embedding, cuda_embedding_backward),
};

TL_KERNEL_TABLE(tl_cuda_embedding_table, TL_DEVICE_CUDA, entries);
