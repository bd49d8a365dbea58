/* CPU sorting and selection kernels over contiguous rows (the last dim): a stable sort (an LSD
 * radix sort of order-preserving keys, insertion for short rows), topk (a heap of the k best, or
 * the sorted row), searchsorted (binary searches) and bincount (in order, deterministic). */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/sort_keys.h"

/* rows of a contiguous tensor along its last dim (a 0-dim tensor: one row of one) */
static int64_t row_length(const tl_tensor *t) {
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}
static int64_t row_count(const tl_tensor *t) {
    const int64_t n = row_length(t);
    return n ? tl_numel(t) / n : 0;
}

/* ---- keys ----------------------------------------------------------------------------------
   Element j of a row as its key (kernels/sort_keys.h), every bit flipped when `flip` (a
   descending sort, topk's largest), so that the wanted order is always ascending keys. */
static int key_width(tl_dtype dtype) {
    return dtype == TL_BOOL ? 8 : (int)tl_dtype_size(dtype) * 8;
}

static uint64_t key_at(tl_dtype dtype, const void *row, int64_t j) {
    switch (dtype) {
    case TL_F32:
        return tl_sort_key_float(((const uint32_t *)row)[j], 32, TL_SORT_F32_INF);
    case TL_F64:
        return tl_sort_key_float(((const uint64_t *)row)[j], 64, TL_SORT_F64_INF);
    case TL_BF16:
        return tl_sort_key_float(((const uint16_t *)row)[j], 16, TL_SORT_BF16_INF);
    case TL_F16:
        return tl_sort_key_float(((const uint16_t *)row)[j], 16, TL_SORT_F16_INF);
    case TL_I32:
        return tl_sort_key_int((uint32_t)((const int32_t *)row)[j], 32);
    case TL_I64:
        return tl_sort_key_int((uint64_t)((const int64_t *)row)[j], 64);
    default:
        return ((const uint8_t *)row)[j] != 0;
    }
}

/* keys[j] = key of row[j] ^ flip for a whole row: the dtype's loop chosen once */
static void fill_keys(tl_dtype dtype, const void *row, int64_t n, uint64_t flip, uint64_t *keys) {
    switch (dtype) {
    case TL_F32:
        for (int64_t j = 0; j < n; j++)
            keys[j] = tl_sort_key_float(((const uint32_t *)row)[j], 32, TL_SORT_F32_INF) ^ flip;
        break;
    case TL_F64:
        for (int64_t j = 0; j < n; j++)
            keys[j] = tl_sort_key_float(((const uint64_t *)row)[j], 64, TL_SORT_F64_INF) ^ flip;
        break;
    case TL_BF16:
        for (int64_t j = 0; j < n; j++)
            keys[j] = tl_sort_key_float(((const uint16_t *)row)[j], 16, TL_SORT_BF16_INF) ^ flip;
        break;
    case TL_F16:
        for (int64_t j = 0; j < n; j++)
            keys[j] = tl_sort_key_float(((const uint16_t *)row)[j], 16, TL_SORT_F16_INF) ^ flip;
        break;
    default:
        for (int64_t j = 0; j < n; j++) keys[j] = key_at(dtype, row, j) ^ flip;
        break;
    }
}

static uint64_t width_mask(int width) {
    return width == 64 ? ~(uint64_t)0 : ((uint64_t)1 << width) - 1;
}

/* ---- a stable sort of (key, position) pairs ------------------------------------------------
   Keys of up to 32 bits travel packed with their position, key << 32 | position (rows under
   2^32): ascending packed values are ascending keys, ties in position order. 64-bit keys travel
   beside a position array. Either way an LSD radix sort by bytes (each pass stable) orders them;
   a byte equal in every element is skipped. */
typedef struct pairs {
    uint64_t *keys;     /* packed or keys */
    int64_t *positions; /* NULL when packed */
    int shift;          /* where the key starts in keys[]: 32 when packed, else 0 */
    int width;          /* key bits */
} pairs;

static void insertion_sort(pairs *p, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        const uint64_t k = p->keys[i];
        const int64_t pos = p->positions ? p->positions[i] : 0;
        int64_t j = i;
        for (; j > 0 && p->keys[j - 1] > k; j--) {
            p->keys[j] = p->keys[j - 1];
            if (p->positions) p->positions[j] = p->positions[j - 1];
        }
        p->keys[j] = k;
        if (p->positions) p->positions[j] = pos;
    }
}

/* sorts p (n pairs) with scratch of the same layout; the result ends in p */
static void radix_sort(pairs *p, pairs *scratch, int64_t n) {
    int64_t count[256];
    pairs from = *p, to = *scratch;
    for (int byte = 0; byte < p->width / 8; byte++) {
        const int shift = p->shift + 8 * byte;
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[(from.keys[i] >> shift) & 0xff]++;
        if (count[(from.keys[0] >> shift) & 0xff] == n) continue; /* one digit: nothing moves */
        int64_t at = 0;
        for (int d = 0; d < 256; d++) {
            const int64_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) {
            const int64_t dst = count[(from.keys[i] >> shift) & 0xff]++;
            to.keys[dst] = from.keys[i];
            if (from.positions) to.positions[dst] = from.positions[i];
        }
        const pairs t = from;
        from = to;
        to = t;
    }
    if (from.keys != p->keys) {
        memcpy(p->keys, from.keys, sizeof *p->keys * (size_t)n);
        if (p->positions) memcpy(p->positions, from.positions, sizeof *p->positions * (size_t)n);
    }
}

/* rows no longer than this sort by insertion */
#define SHORT_ROW 32

enum { SORT_SHORT, SORT_RADIX };
static const tl_kernel_variant sort_variants[] = {
    [SORT_SHORT] = TL_VARIANT(sort, TL_DTYPES_ALL, "insertion", "rows of at most 32 elements"),
    [SORT_RADIX] = TL_VARIANT(sort, TL_DTYPES_ALL, "radix", "rows of more than 32 elements"),
};

/* scratch of one thread for rows of n: two pair arrays */
typedef struct sort_scratch {
    pairs a, b;
    void *block;
} sort_scratch;

static bool scratch_new(sort_scratch *s, int64_t n, int width) {
    const bool packed = width <= 32 && n <= (int64_t)UINT32_MAX;
    const size_t per = packed ? 8 : 16, len = (size_t)(n ? n : 1);
    s->block = malloc(2 * per * len);
    if (!s->block) return false;
    uint64_t *base = s->block;
    s->a = (pairs){base, packed ? NULL : (int64_t *)(base + len), packed ? 32 : 0, width};
    base += (packed ? 1 : 2) * len;
    s->b = (pairs){base, packed ? NULL : (int64_t *)(base + len), packed ? 32 : 0, width};
    return true;
}

/* fills s->a with row's keys and positions and sorts them stably (flip: descending) */
static void sort_row(sort_scratch *s, tl_dtype dtype, const void *row, int64_t n, uint64_t flip) {
    pairs *p = &s->a;
    fill_keys(dtype, row, n, flip, p->keys);
    if (p->positions)
        for (int64_t j = 0; j < n; j++) p->positions[j] = j;
    else
        for (int64_t j = 0; j < n; j++) p->keys[j] = p->keys[j] << 32 | (uint64_t)j;
    if (n <= SHORT_ROW)
        insertion_sort(p, n);
    else
        radix_sort(p, &s->b, n);
}

static int64_t position_at(const pairs *p, int64_t i) {
    return p->positions ? p->positions[i] : (int64_t)(p->keys[i] & 0xffffffffu);
}

/* values[i] = row[position i] and indices[i] = that position counted from base, for the first
   k sorted pairs */
static void write_sorted(const pairs *p, int64_t k, const char *row, size_t size, char *values,
                         int64_t *indices, int64_t base) {
    for (int64_t i = 0; i < k; i++) {
        const int64_t j = position_at(p, i);
        memcpy(values + (size_t)i * size, row + (size_t)j * size, size);
        indices[i] = j + base;
    }
}

/* out {values, indices} (x's shape, contiguous) = x's rows sorted stably; descending
   (args->scalar[0] != 0) orders by the flipped keys (NaN first, ties still in position order) */
static tl_status cpu_sort(tl_tensor *const *out, const tl_tensor *const *in,
                          const tl_op_args *args) {
    const tl_tensor *x = in[0];
    const int64_t n = row_length(x), rows = row_count(x);
    if (rows == 0 || n == 0) return TL_OK;
    const int width = key_width(x->dtype);
    const uint64_t flip = args->scalar[0] != 0 ? width_mask(width) : 0;
    const int64_t base = (int64_t)args->scalar[1]; /* positions counted from it */
    const size_t size = tl_dtype_size(x->dtype);
    tl_variant_ran(&sort_variants[n <= SHORT_ROW ? SORT_SHORT : SORT_RADIX], x->dtype);
    const char *xs = tl_data(x);
    char *vs = tl_data(out[0]);
    int64_t *is = tl_data(out[1]);
    bool failed = false;
#pragma omp parallel if (rows > 1 && rows * n > TL_CPU_PARALLEL_THRESHOLD)
    {
        sort_scratch s;
        const bool ok = scratch_new(&s, n, width);
        if (!ok) {
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < rows; r++) {
            if (!ok) continue;
            const char *row = xs + (size_t)(r * n) * size;
            sort_row(&s, x->dtype, row, n, flip);
            write_sorted(&s.a, n, row, size, vs + (size_t)(r * n) * size, is + r * n, base);
        }
        free(s.block);
    }
    if (failed)
        return tl_error(TL_ERR_MEMORY, "sort: out of memory for rows of %lld", (long long)n);
    return TL_OK;
}

/* ---- topk ----------------------------------------------------------------------------------
   The k smallest (key, position) pairs of a row, keys flipped for the largest: a max-heap of the
   k best so far, which an element enters only when it beats the worst of them (scanning in
   position order, a tie never enters: ties keep position order), then sorted; or, for a k near
   the row's length, the whole row sorted. */
enum { TOPK_HEAP, TOPK_SORT };
static const tl_kernel_variant topk_variants[] = {
    [TOPK_HEAP] = TL_VARIANT(topk, TL_DTYPES_ALL, "heap", "k * 8 <= the row's length"),
    [TOPK_SORT] = TL_VARIANT(topk, TL_DTYPES_ALL, "sort", "k * 8 > the row's length"),
};

typedef struct ranked {
    uint64_t key;
    int64_t position;
} ranked;

static bool ranked_before(ranked a, ranked b) {
    return a.key < b.key || (a.key == b.key && a.position < b.position);
}

/* restores the max-heap (the worst pair on top) below slot i */
static void sift_down(ranked *heap, int64_t k, int64_t i) {
    for (;;) {
        int64_t worst = i;
        const int64_t l = 2 * i + 1, r = l + 1;
        if (l < k && ranked_before(heap[worst], heap[l])) worst = l;
        if (r < k && ranked_before(heap[worst], heap[r])) worst = r;
        if (worst == i) return;
        const ranked t = heap[i];
        heap[i] = heap[worst];
        heap[worst] = t;
        i = worst;
    }
}

/* keys of a row made by blocks of this many elements (cache-resident), not all at once */
#define TOPK_BLOCK 2048

/* the k best of a row's n elements (k <= n), best first: their keys made a block at a time in
   keys (TOPK_BLOCK of them), so the row is read once and nothing of its size is written */
TL_CPU_WIDE static void heap_top(ranked *heap, uint64_t *keys, tl_dtype dtype, const char *row,
                                 size_t size, int64_t n, int64_t k, uint64_t flip) {
    for (int64_t b = 0; b < n; b += TOPK_BLOCK) {
        const int64_t len = n - b < TOPK_BLOCK ? n - b : TOPK_BLOCK;
        fill_keys(dtype, row + (size_t)b * size, len, flip, keys);
        int64_t j = 0;
        for (; j < len && b + j < k; j++) { /* the first k fill the heap */
            heap[b + j] = (ranked){keys[j], b + j};
            if (b + j == k - 1)
                for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i);
        }
        uint64_t worst = j < len ? heap[0].key : 0; /* the heap's top, in a register */
        for (; j < len; j++) {
            if (keys[j] >= worst) continue; /* a tie comes later: it never beats the worst */
            heap[0] = (ranked){keys[j], b + j};
            sift_down(heap, k, 0);
            worst = heap[0].key;
        }
    }
    /* heap sort in place: the worst goes last */
    for (int64_t end = k - 1; end > 0; end--) {
        const ranked t = heap[0];
        heap[0] = heap[end];
        heap[end] = t;
        sift_down(heap, end, 0);
    }
}

/* out {values, indices} [rows, k]: each row's k largest (args->scalar[1] != 0) or smallest
   (k = args->scalar[0]), best first, ties in position order */
static tl_status cpu_topk(tl_tensor *const *out, const tl_tensor *const *in,
                          const tl_op_args *args) {
    const tl_tensor *x = in[0];
    const int64_t n = row_length(x), rows = row_count(x), k = (int64_t)args->scalar[0];
    if (rows == 0 || k == 0) return TL_OK;
    const int width = key_width(x->dtype);
    const uint64_t flip = args->scalar[1] != 0 ? width_mask(width) : 0;
    const size_t size = tl_dtype_size(x->dtype);
    const bool by_heap = k * 8 <= n;
    tl_variant_ran(&topk_variants[by_heap ? TOPK_HEAP : TOPK_SORT], x->dtype);
    const char *xs = tl_data(x);
    char *vs = tl_data(out[0]);
    int64_t *is = tl_data(out[1]);
    bool failed = false;
#pragma omp parallel if (rows > 1 && rows * n > TL_CPU_PARALLEL_THRESHOLD)
    {
        sort_scratch s = {0};
        ranked *heap = NULL;
        uint64_t *keys = NULL;
        const bool ok = by_heap ? (heap = malloc(sizeof *heap * (size_t)k)) != NULL &&
                                      (keys = malloc(sizeof *keys * TOPK_BLOCK)) != NULL
                                : scratch_new(&s, n, width);
        if (!ok) {
#pragma omp atomic write
            failed = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < rows; r++) {
            if (!ok) continue;
            const char *row = xs + (size_t)(r * n) * size;
            char *values = vs + (size_t)(r * k) * size;
            int64_t *indices = is + r * k;
            if (!by_heap) {
                sort_row(&s, x->dtype, row, n, flip);
                write_sorted(&s.a, k, row, size, values, indices, 0);
                continue;
            }
            heap_top(heap, keys, x->dtype, row, size, n, k, flip);
            for (int64_t i = 0; i < k; i++) {
                memcpy(values + (size_t)i * size, row + (size_t)heap[i].position * size, size);
                indices[i] = heap[i].position;
            }
        }
        free(heap);
        free(keys);
        free(s.block);
    }
    if (failed)
        return tl_error(TL_ERR_MEMORY, "topk: out of memory for rows of %lld", (long long)n);
    return TL_OK;
}

/* ---- searchsorted ----------------------------------------------------------------------------
   out [rows, m] (int64) = for each value, the number of elements of its row of sorted that come
   before it (right: that are not after it), in the keys' order: the 0-based insertion point. A
   sorted of one row serves every row of values. */
static tl_status cpu_searchsorted(tl_tensor *const *out, const tl_tensor *const *in,
                                  const tl_op_args *args) {
    const tl_tensor *sorted = in[0], *values = in[1];
    const int64_t n = row_length(sorted), m = row_length(values), rows = row_count(values);
    const bool right = args->scalar[0] != 0, shared = row_count(sorted) == 1;
    const size_t size = tl_dtype_size(sorted->dtype);
    const char *ss = tl_data(sorted), *vs = tl_data(values);
    int64_t *o = tl_data(out[0]);
    const tl_dtype dtype = sorted->dtype;
#pragma omp parallel for schedule(static) if (rows * m > TL_CPU_PARALLEL_THRESHOLD / 16)
    for (int64_t r = 0; r < rows; r++) {
        const char *row = ss + (shared ? 0 : (size_t)(r * n) * size);
        for (int64_t j = 0; j < m; j++) {
            const uint64_t v = key_at(dtype, vs + (size_t)(r * m) * size, j);
            int64_t lo = 0, hi = n; /* the answer lies in [lo, hi] */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                const uint64_t s = key_at(dtype, row, mid);
                if (right ? s <= v : s < v)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            o[r * m + j] = lo;
        }
    }
    return TL_OK;
}

/* ---- bincount ------------------------------------------------------------------------------
   out [length] = how many elements of bins (0-based, checked in [0, length)) hold each value,
   or the sum of their weights (in order, in double, then rounded to out's dtype). */
static tl_status cpu_bincount(tl_tensor *const *out, const tl_tensor *const *in,
                              const tl_op_args *args) {
    (void)args;
    const tl_tensor *bins = in[0], *weights = in[1];
    tl_tensor *o = out[0];
    const int64_t n = tl_numel(bins), length = tl_numel(o);
    const bool wide = bins->dtype == TL_I64;
    const int64_t *b64 = tl_data(bins);
    const int32_t *b32 = tl_data(bins);
    if (!weights) {
        int64_t *counts = tl_data(o);
        memset(counts, 0, sizeof *counts * (size_t)length);
        for (int64_t i = 0; i < n; i++) counts[wide ? b64[i] : b32[i]]++;
        return TL_OK;
    }
    double *sums = calloc((size_t)(length ? length : 1), sizeof *sums);
    if (!sums)
        return tl_error(TL_ERR_MEMORY, "bincount: out of memory for %lld bins", (long long)length);
    const void *w = tl_data(weights);
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (weights->dtype) {
        case TL_F64:
            v = ((const double *)w)[i];
            break;
        case TL_BF16:
            v = tl_bf16_load(((const uint16_t *)w)[i]);
            break;
        case TL_F16:
            v = tl_f16_load(((const uint16_t *)w)[i]);
            break;
        default:
            v = ((const float *)w)[i];
            break;
        }
        sums[wide ? b64[i] : b32[i]] += v;
    }
    for (int64_t i = 0; i < length; i++) {
        if (o->dtype == TL_F64)
            ((double *)tl_data(o))[i] = sums[i];
        else
            ((float *)tl_data(o))[i] = (float)sums[i];
    }
    free(sums);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(sort, TL_DTYPES_ALL, tensors, cpu_sort),
    TL_KERNEL(topk, TL_DTYPES_ALL, tensors, cpu_topk),
    TL_KERNEL(searchsorted, TL_DTYPES_NUMERIC, tensors, cpu_searchsorted),
    TL_KERNEL(bincount, TL_DTYPES_INTEGER, tensors, cpu_bincount),
};

TL_KERNEL_TABLE(tl_cpu_sort_table, TL_DEVICE_CPU, entries);
TL_VARIANT_TABLE(tl_cpu_sort_variants, TL_DEVICE_CPU, sort_variants);
TL_VARIANT_TABLE(tl_cpu_topk_variants, TL_DEVICE_CPU, topk_variants);
