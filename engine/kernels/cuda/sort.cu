/* CUDA sorting and selection kernels over contiguous rows and their table, the dtypes of
 * cpu/sort.c: sort by CUB's radix sorts of order-preserving keys, topk by a block per row that
 * selects the k best (a threshold from the threads' maxima, or an exact radix select) before
 * sorting them, searchsorted by binary searches, bincount by atomics. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/sort_keys.h"

#define SORT_THREADS 256
#define TOPK_THREADS 512 /* a power of 2: the threads' maxima are sorted by a bitonic network */
#define TOPK_WARPS   (TOPK_THREADS / 32)
#define TOPK_CAP     2048 /* candidates a block sorts (a power of 2) */
#define TOPK_MAX_K   TOPK_THREADS

/* ---- keys: an element as the unsigned key of kernels/sort_keys.h and back ------------------ */
template <class K, class T> __device__ __forceinline__ K bits_of(T v) {
    K b;
    memcpy(&b, &v, sizeof b);
    return b;
}
template <class T, class K> __device__ __forceinline__ T of_bits(K b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

template <class T, class U, uint64_t INF> struct float_keys {
    typedef U K;
    static constexpr int width = sizeof(U) * 8;
    __device__ static K key(T v) { return (K)tl_sort_key_float(bits_of<U>(v), width, INF); }
    __device__ static T value(K k) { return of_bits<T>((U)tl_sort_float_of_key(k, width, INF)); }
    __device__ static bool keeps(T v) {
        return tl_sort_float_keeps_bits(bits_of<U>(v), width, INF);
    }
};
template <class T, class U> struct int_keys {
    typedef U K;
    static constexpr int width = sizeof(U) * 8;
    __device__ static K key(T v) { return (K)tl_sort_key_int(bits_of<U>(v), width); }
    __device__ static T value(K k) { return of_bits<T>((U)(k ^ ((U)1 << (width - 1)))); }
    __device__ static bool keeps(T) { return true; }
};
struct bool_keys {
    typedef uint8_t K;
    static constexpr int width = 8;
    __device__ static K key(uint8_t v) { return v != 0; }
    __device__ static uint8_t value(K k) { return k; }
    __device__ static bool keeps(uint8_t) { return true; }
};
template <int D> struct keys_of;
template <> struct keys_of<TL_CUDA_F32> : float_keys<float, uint32_t, TL_SORT_F32_INF> {};
template <> struct keys_of<TL_CUDA_F64> : float_keys<double, uint64_t, TL_SORT_F64_INF> {};
template <> struct keys_of<TL_CUDA_BF16> : float_keys<uint16_t, uint16_t, TL_SORT_BF16_INF> {};
template <> struct keys_of<TL_CUDA_F16> : float_keys<uint16_t, uint16_t, TL_SORT_F16_INF> {};
template <> struct keys_of<TL_CUDA_I32> : int_keys<int32_t, uint32_t> {};
template <> struct keys_of<TL_CUDA_I64> : int_keys<int64_t, uint64_t> {};
template <> struct keys_of<TL_CUDA_BOOL> : bool_keys {};

/* ---- sort -------------------------------------------------------------------------------------
   keys[i] = key(x[i]) ^ flip (flip all ones: descending), positions[i] = i's place in its row;
   *lossy = 1 when some element does not come back from its key (-0, a NaN's payload), so that the
   values are then read from x rather than from the keys. */
template <class S, class T, class V>
__global__ void __launch_bounds__(SORT_THREADS)
    keys_kernel(const T *x, typename S::K *keys, V *positions, int64_t total, int64_t n,
                typename S::K flip, int *lossy) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const T v = x[i];
        keys[i] = S::key(v) ^ flip;
        positions[i] = (V)(i % n);
        if (!S::keeps(v)) *lossy = 1;
    }
}

__global__ void offsets_kernel(int64_t *offsets, int64_t rows, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r <= rows; r += stride)
        offsets[r] = r * n;
}

/* the first k of each sorted row of n: values (from the keys, or from x when lossy) and their
   positions as int64, counted from base */
template <class S, class T, class V>
__global__ void __launch_bounds__(SORT_THREADS)
    sorted_out_kernel(const T *x, const typename S::K *keys, const V *positions, T *values,
                      int64_t *indices, int64_t rows, int64_t n, int64_t k, typename S::K flip,
                      const int *lossy, int64_t base) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, total = rows * k;
    const bool from_x = *lossy != 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / k, at = r * n + (i - r * k);
        const int64_t position = (int64_t)positions[at];
        values[i] = from_x ? x[r * n + position] : S::value(keys[at] ^ flip);
        indices[i] = position + base;
    }
}

static size_t aligned(size_t bytes) {
    return (bytes + 255) / 256 * 256;
}

enum { SORT_RADIX, SORT_SEGMENTED };
static const tl_kernel_variant sort_variants[] = {
    [SORT_RADIX] = TL_VARIANT(sort, TL_DTYPES_ALL, "radix",
                              "one row: cub::DeviceRadixSort of the keys with positions"),
    [SORT_SEGMENTED] = TL_VARIANT(sort, TL_DTYPES_ALL, "segmented",
                                  "several rows: cub::DeviceSegmentedSort, stable"),
};

/* values, indices [rows, k] = the first k of each of x's rows [rows, n] sorted stably by
   key ^ flip (ascending): sort (k = n) and topk's sort path */
template <class S, class T, class V>
static tl_status sort_rows(const tl_cuda_where &at, const T *x, T *values, int64_t *indices,
                           int64_t rows, int64_t n, int64_t k, typename S::K flip, int64_t first) {
    typedef typename S::K K;
    const int64_t total = rows * n;
    size_t temp = 0;
    if (rows == 1)
        TL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp, (const K *)nullptr, (K *)nullptr,
                                                    (const V *)nullptr, (V *)nullptr, total, 0,
                                                    S::width, at.stream),
                    at.op, "sizing the sort");
    else
        TL_CUDA_TRY(cub::DeviceSegmentedSort::StableSortPairs(
                        nullptr, temp, (const K *)nullptr, (K *)nullptr, (const V *)nullptr,
                        (V *)nullptr, total, rows, (const int64_t *)nullptr,
                        (const int64_t *)nullptr, at.stream),
                    at.op, "sizing the sort");
    const size_t key_bytes = aligned((size_t)total * sizeof(K));
    const size_t pos_bytes = aligned((size_t)total * sizeof(V));
    const size_t offset_bytes = rows > 1 ? aligned((size_t)(rows + 1) * sizeof(int64_t)) : 0;
    tl_cuda_scratch scratch;
    TL_TRY(scratch.get(at, 2 * key_bytes + 2 * pos_bytes + offset_bytes + 256 + temp));
    char *base = (char *)scratch.ptr;
    K *keys_in = (K *)base, *keys = (K *)(base + key_bytes);
    V *pos_in = (V *)(base + 2 * key_bytes), *pos = (V *)(base + 2 * key_bytes + pos_bytes);
    int64_t *offsets = (int64_t *)(base + 2 * key_bytes + 2 * pos_bytes);
    int *lossy = (int *)(base + 2 * key_bytes + 2 * pos_bytes + offset_bytes);
    void *temp_storage = base + 2 * key_bytes + 2 * pos_bytes + offset_bytes + 256;
    TL_CUDA_TRY(cudaMemsetAsync(lossy, 0, sizeof *lossy, at.stream), at.op, "clearing a flag");
    const unsigned grid = tl_cuda_grid(tl_ceil_div(total, SORT_THREADS), at.sm_count);
    keys_kernel<S><<<grid, SORT_THREADS, 0, at.stream>>>(x, keys_in, pos_in, total, n, flip, lossy);
    TL_TRY(tl_cuda_check_launch(at.op));
    if (rows == 1) {
        TL_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp_storage, temp, keys_in, keys, pos_in, pos,
                                                    total, 0, S::width, at.stream),
                    at.op, "sorting");
    } else {
        offsets_kernel<<<tl_cuda_grid(tl_ceil_div(rows + 1, SORT_THREADS), at.sm_count),
                         SORT_THREADS, 0, at.stream>>>(offsets, rows, n);
        TL_TRY(tl_cuda_check_launch(at.op));
        TL_CUDA_TRY(cub::DeviceSegmentedSort::StableSortPairs(temp_storage, temp, keys_in, keys,
                                                              pos_in, pos, total, rows, offsets,
                                                              offsets + 1, at.stream),
                    at.op, "sorting");
    }
    const unsigned out_grid = tl_cuda_grid(tl_ceil_div(rows * k, SORT_THREADS), at.sm_count);
    sorted_out_kernel<S><<<out_grid, SORT_THREADS, 0, at.stream>>>(x, keys, pos, values, indices,
                                                                   rows, n, k, flip, lossy, first);
    return tl_cuda_check_launch(at.op);
}

template <class S, class T>
static tl_status sort_rows_any(const tl_cuda_where &at, const T *x, T *values, int64_t *indices,
                               int64_t rows, int64_t n, int64_t k, typename S::K flip,
                               int64_t base) {
    if (n <= INT32_MAX)
        return sort_rows<S, T, int32_t>(at, x, values, indices, rows, n, k, flip, base);
    return sort_rows<S, T, int64_t>(at, x, values, indices, rows, n, k, flip, base);
}

static int64_t row_length(const tl_tensor *t) {
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

static tl_status cuda_sort(tl_tensor *const *out, const tl_tensor *const *in,
                           const tl_op_args *args) {
    const tl_tensor *x = in[0];
    const int64_t n = row_length(x), rows = n ? tl_numel(x) / n : 0;
    if (rows == 0 || n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "sort", &at));
    tl_variant_ran(&sort_variants[rows == 1 ? SORT_RADIX : SORT_SEGMENTED], x->dtype);
    const bool descending = args->scalar[0] != 0;
    return tl_cuda_dispatch<TL_CUDA_ALL>(tl_cuda_dtype_of(x), at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef keys_of<E::dtype> S;
        typedef typename E::T T;
        const typename S::K flip = descending ? (typename S::K) ~(typename S::K)0 : 0;
        return sort_rows_any<S>(at, tl_cuda_data<const T>(x), tl_cuda_data<T>(out[0]),
                                tl_cuda_data<int64_t>(out[1]), rows, n, n, flip,
                                (int64_t)args->scalar[1]);
    });
}

/* ---- topk: a block per row ---------------------------------------------------------------------
   With keys flipped for the largest, the k best of a row are its k largest (key, -position).
   Each thread takes the maximum of its elements; at least k threads hold a maximum >= t, the
   k-th largest maximum, so the k best all have keys >= t, and so do few others unless many keys
   tie: those elements (the candidates) are gathered in shared memory, sorted by a bitonic
   network and the first k written. When more than TOPK_CAP are candidates, an exact radix select
   (8 bits a pass over the row) finds the k-th best key, and the candidates become the keys above
   it and, in position order, as many of its ties as make k. */

/* a before b: the larger key, then the smaller position */
template <class K>
__device__ __forceinline__ bool ranks_before(K ka, int32_t pa, K kb, int32_t pb) {
    return ka > kb || (ka == kb && pa < pb);
}

/* sorts size (a power of 2) pairs of shared memory best first, every thread of the block taking
   part (positions NULL: keys alone, largest first) */
template <class K> __device__ void bitonic_sort(K *key, int32_t *pos, int size) {
    for (int span = 2; span <= size; span <<= 1)
        for (int j = span >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < size; i += blockDim.x) {
                const int other = i ^ j;
                if (other <= i) continue;
                const int32_t pi = pos ? pos[i] : 0, po = pos ? pos[other] : 0;
                const bool ascending = (i & span) == 0; /* this half best first */
                const bool swap = ascending ? ranks_before(key[other], po, key[i], pi)
                                            : ranks_before(key[i], pi, key[other], po);
                if (swap) {
                    const K t = key[i];
                    key[i] = key[other];
                    key[other] = t;
                    if (pos) pos[i] = po, pos[other] = pi;
                }
            }
            __syncthreads();
        }
}

template <class K> struct topk_shared {
    K maxima[TOPK_THREADS];
    K key[TOPK_CAP];
    int32_t pos[TOPK_CAP];
    unsigned hist[256];
    int warp_total[TOPK_WARPS];
    int count;
    K prefix;
    int need;
};

/* appends the elements of row whose key ^ flip passes keep to the candidates (in any order);
   slots past TOPK_CAP are counted, not written */
template <class S, class T, class Keep>
__device__ void gather_candidates(topk_shared<typename S::K> &sh, const T *row, int n,
                                  typename S::K flip, Keep keep) {
    const int lane = threadIdx.x & 31;
    const int rounded = (n + TOPK_THREADS - 1) / TOPK_THREADS * TOPK_THREADS;
    for (int j = threadIdx.x; j < rounded; j += TOPK_THREADS) {
        const typename S::K key = j < n ? S::key(row[j]) ^ flip : 0;
        const bool take = j < n && keep(key);
        const unsigned ballot = __ballot_sync(0xffffffffu, take);
        int base = 0;
        if (lane == 0 && ballot) base = atomicAdd(&sh.count, __popc(ballot));
        base = __shfl_sync(0xffffffffu, base, 0);
        const int at = base + __popc(ballot & ((1u << lane) - 1));
        if (take && at < TOPK_CAP) sh.key[at] = key, sh.pos[at] = j;
    }
    __syncthreads();
}

/* the exact k-th best key of row (sh.prefix) and how many of its ties make k (sh.need) */
template <class S, class T>
__device__ void radix_select(topk_shared<typename S::K> &sh, const T *row, int n, int k,
                             typename S::K flip) {
    typedef typename S::K K;
    K prefix = 0, mask = 0;
    int need = k;
    for (int shift = S::width - 8; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += TOPK_THREADS) sh.hist[b] = 0;
        __syncthreads();
        for (int j = threadIdx.x; j < n; j += TOPK_THREADS) {
            const K key = S::key(row[j]) ^ flip;
            if ((K)(key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xff], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* the digit where the count from the top reaches need */
            int above = 0;
            for (int d = 255; d >= 0; d--) {
                if (above + (int)sh.hist[d] >= need) {
                    sh.prefix = (K)(prefix | (K)((K)d << shift));
                    sh.need = need - above;
                    break;
                }
                above += (int)sh.hist[d];
            }
        }
        __syncthreads();
        prefix = sh.prefix;
        need = sh.need;
        mask = (K)(mask | (K)((K)0xff << shift));
    }
}

/* the first sh.need elements of row (in position order) whose key is the threshold, appended at
   slot `first` */
template <class S, class T>
__device__ void take_ties(topk_shared<typename S::K> &sh, const T *row, int n, typename S::K flip,
                          int first) {
    const typename S::K threshold = sh.prefix;
    const int need = sh.need, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    int taken = 0;
    for (int tile = 0; tile < n && taken < need; tile += TOPK_THREADS) {
        const int j = tile + threadIdx.x;
        const bool tie = j < n && (S::key(row[j]) ^ flip) == threshold;
        const unsigned ballot = __ballot_sync(0xffffffffu, tie);
        if (lane == 0) sh.warp_total[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, all = 0;
        for (int w = 0; w < TOPK_WARPS; w++) {
            if (w < warp) before += sh.warp_total[w];
            all += sh.warp_total[w];
        }
        const int rank = taken + before + __popc(ballot & ((1u << lane) - 1));
        if (tie && rank < need) sh.key[first + rank] = threshold, sh.pos[first + rank] = j;
        taken += all;
        __syncthreads();
    }
}

template <class S, class T>
__global__ void __launch_bounds__(TOPK_THREADS)
    topk_select_kernel(const T *x, T *values, int64_t *indices, int64_t rows, int n, int k,
                       typename S::K flip) {
    typedef typename S::K K;
    __shared__ topk_shared<K> sh;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *row = x + r * n;
        K best = 0;
        for (int j = threadIdx.x; j < n; j += TOPK_THREADS) {
            const K key = S::key(row[j]) ^ flip;
            best = key > best ? key : best;
        }
        sh.maxima[threadIdx.x] = best;
        if (threadIdx.x == 0) sh.count = 0;
        __syncthreads();
        bitonic_sort<K>(sh.maxima, nullptr, TOPK_THREADS);
        const K threshold = sh.maxima[k - 1];
        gather_candidates<S>(sh, row, n, flip, [&](K key) { return key >= threshold; });
        int count = sh.count;
        __syncthreads();
        if (count > TOPK_CAP) { /* many ties at the threshold: select exactly */
            radix_select<S>(sh, row, n, k, flip);
            if (threadIdx.x == 0) sh.count = 0;
            __syncthreads();
            const K exact = sh.prefix;
            gather_candidates<S>(sh, row, n, flip, [&](K key) { return key > exact; });
            const int above = k - sh.need;
            take_ties<S>(sh, row, n, flip, above);
            count = k;
        }
        int size = 1;
        while (size < count) size <<= 1;
        for (int i = count + threadIdx.x; i < size; i += TOPK_THREADS)
            sh.key[i] = 0, sh.pos[i] = INT32_MAX; /* padding sorts last */
        __syncthreads();
        bitonic_sort<K>(sh.key, sh.pos, size);
        for (int i = threadIdx.x; i < k; i += TOPK_THREADS) {
            values[r * k + i] = row[sh.pos[i]];
            indices[r * k + i] = sh.pos[i];
        }
        __syncthreads();
    }
}

enum { TOPK_SELECT, TOPK_SORT };
static const tl_kernel_variant topk_variants[] = {
    [TOPK_SELECT] = TL_VARIANT(topk, TL_DTYPES_ALL, "select",
                               "k <= 512 and rows under 2^31 elements: a block per row selects"),
    [TOPK_SORT] = TL_VARIANT(topk, TL_DTYPES_ALL, "sort",
                             "k > 512: the rows sorted (as sort), the first k kept"),
};

static tl_status cuda_topk(tl_tensor *const *out, const tl_tensor *const *in,
                           const tl_op_args *args) {
    const tl_tensor *x = in[0];
    const int64_t n = row_length(x), rows = n ? tl_numel(x) / n : 0, k = (int64_t)args->scalar[0];
    if (rows == 0 || k == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "topk", &at));
    const bool select = k <= TOPK_MAX_K && n <= INT32_MAX;
    tl_variant_ran(&topk_variants[select ? TOPK_SELECT : TOPK_SORT], x->dtype);
    const bool largest = args->scalar[1] != 0;
    return tl_cuda_dispatch<TL_CUDA_ALL>(tl_cuda_dtype_of(x), at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef keys_of<E::dtype> S;
        typedef typename E::T T;
        typedef typename S::K K;
        const K flip = largest ? 0 : (K) ~(K)0; /* the kernels pick the largest keys */
        const T *xs = tl_cuda_data<const T>(x);
        T *values = tl_cuda_data<T>(out[0]);
        int64_t *indices = tl_cuda_data<int64_t>(out[1]);
        if (!select) /* the sort orders ascending keys: flipped for the largest */
            return sort_rows_any<S>(at, xs, values, indices, rows, n, k, (K)~flip, 0);
        const unsigned grid = tl_cuda_grid(rows, at.sm_count, 8);
        topk_select_kernel<S>
            <<<grid, TOPK_THREADS, 0, at.stream>>>(xs, values, indices, rows, (int)n, (int)k, flip);
        return tl_cuda_check_launch(at.op);
    });
}

/* ---- searchsorted: a thread per value, a binary search of its row's keys ------------------ */
template <class S, class T>
__global__ void __launch_bounds__(SORT_THREADS)
    searchsorted_kernel(const T *sorted, const T *values, int64_t *out, int64_t total, int64_t n,
                        int64_t m, bool shared, bool right) {
    typedef typename S::K K;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const T *row = sorted + (shared ? 0 : i / m * n);
        const K v = S::key(values[i]);
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            const K s = S::key(row[mid]);
            if (right ? s <= v : s < v)
                lo = mid + 1;
            else
                hi = mid;
        }
        out[i] = lo;
    }
}

static tl_status cuda_searchsorted(tl_tensor *const *out, const tl_tensor *const *in,
                                   const tl_op_args *args) {
    const tl_tensor *sorted = in[0], *values = in[1];
    const int64_t n = row_length(sorted), m = row_length(values), total = tl_numel(values);
    if (total == 0) return TL_OK;
    const bool shared = n == 0 || tl_numel(sorted) / n == 1, right = args->scalar[0] != 0;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "searchsorted", &at));
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(
        tl_cuda_dtype_of(sorted), at.op, [&](auto e) -> tl_status {
            typedef decltype(e) E;
            typedef typename E::T T;
            const unsigned grid = tl_cuda_grid(tl_ceil_div(total, SORT_THREADS), at.sm_count);
            searchsorted_kernel<keys_of<E::dtype>><<<grid, SORT_THREADS, 0, at.stream>>>(
                tl_cuda_data<const T>(sorted), tl_cuda_data<const T>(values),
                tl_cuda_data<int64_t>(out[0]), total, n, m, shared, right);
            return tl_cuda_check_launch(at.op);
        });
}

/* ---- bincount: atomics into int64 counts or float64 sums ------------------------------------ */
template <class I>
__global__ void __launch_bounds__(SORT_THREADS)
    count_kernel(const I *bins, int64_t n, unsigned long long *counts) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(counts + bins[i], 1ull);
}

template <class E, class I>
__global__ void __launch_bounds__(SORT_THREADS)
    weigh_kernel(const I *bins, const typename E::T *weights, int64_t n, double *sums) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        atomicAdd(sums + bins[i], E::wide(weights[i]));
}

__global__ void to_float_kernel(const double *sums, float *out, int64_t length) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < length; i += stride)
        out[i] = (float)sums[i];
}

template <class I>
static tl_status launch_bincount(const tl_cuda_where &at, const I *bins, int64_t n,
                                 const tl_tensor *weights, tl_tensor *out) {
    const int64_t length = tl_numel(out);
    const unsigned grid = tl_cuda_grid(tl_ceil_div(n, SORT_THREADS), at.sm_count);
    if (!weights) {
        TL_CUDA_TRY(cudaMemsetAsync(tl_data(out), 0, (size_t)length * 8, at.stream), at.op,
                    "zeroing the counts");
        if (n == 0) return TL_OK;
        count_kernel<<<grid, SORT_THREADS, 0, at.stream>>>(bins, n,
                                                           tl_cuda_data<unsigned long long>(out));
        return tl_cuda_check_launch(at.op);
    }
    tl_cuda_scratch scratch;
    double *sums = tl_cuda_data<double>(out);
    if (out->dtype != TL_F64) {
        TL_TRY(scratch.get(at, (size_t)length * sizeof(double)));
        sums = (double *)scratch.ptr;
    }
    TL_CUDA_TRY(cudaMemsetAsync(sums, 0, (size_t)length * sizeof(double), at.stream), at.op,
                "zeroing the sums");
    if (n > 0) {
        TL_TRY(tl_cuda_floating(tl_cuda_dtype_of(weights), at.op, [&](auto e) -> tl_status {
            typedef decltype(e) E;
            weigh_kernel<E><<<grid, SORT_THREADS, 0, at.stream>>>(
                bins, tl_cuda_data<const typename E::T>(weights), n, sums);
            return tl_cuda_check_launch(at.op);
        }));
    }
    if (out->dtype == TL_F64) return TL_OK;
    to_float_kernel<<<tl_cuda_grid(tl_ceil_div(length, SORT_THREADS), at.sm_count), SORT_THREADS, 0,
                      at.stream>>>(sums, tl_cuda_data<float>(out), length);
    return tl_cuda_check_launch(at.op);
}

static tl_status cuda_bincount(tl_tensor *const *out, const tl_tensor *const *in,
                               const tl_op_args *args) {
    (void)args;
    const tl_tensor *bins = in[0], *weights = in[1];
    if (tl_numel(out[0]) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "bincount", &at));
    const int64_t n = tl_numel(bins);
    if (bins->dtype == TL_I64)
        return launch_bincount(at, tl_cuda_data<const int64_t>(bins), n, weights, out[0]);
    return launch_bincount(at, tl_cuda_data<const int32_t>(bins), n, weights, out[0]);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(sort, TL_DTYPES_ALL, tensors, cuda_sort),
    TL_KERNEL(topk, TL_DTYPES_ALL, tensors, cuda_topk),
    TL_KERNEL(searchsorted, TL_DTYPES_NUMERIC, tensors, cuda_searchsorted),
    TL_KERNEL(bincount, TL_DTYPES_INTEGER, tensors, cuda_bincount),
};

TL_KERNEL_TABLE(tl_cuda_sort_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_sort_variants, TL_DEVICE_CUDA, sort_variants);
TL_VARIANT_TABLE(tl_cuda_topk_variants, TL_DEVICE_CUDA, topk_variants);
