/* CPU embedding: row gather, and a deterministic scatter-add backward (counting sort). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"

/* Indices as int64 (int32 ones widened), in a new array the caller frees. */
static int64_t *indices_as_i64(const tl_tensor *indices, int64_t n) {
    int64_t *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) return NULL;
    if (indices->dtype == TL_I64) {
        memcpy(out, tl_data(indices), (size_t)n * sizeof *out);
    } else {
        const int32_t *idx = tl_data(indices);
        for (int64_t i = 0; i < n; i++) out[i] = idx[i];
    }
    return out;
}

/* out [n, D] = src [V, D] rows at indices: only bytes move, one version for every dtype. */
static tl_status gather_rows(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    const int64_t n = tl_numel(indices), row = src->shape[1] * (int64_t)tl_dtype_size(src->dtype);
    char *o = tl_data(out);
    const char *w = tl_data(src);
    if (indices->dtype == TL_I64) {
        const int64_t *idx = tl_data(indices);
#pragma omp parallel for schedule(static) if (n * row > 4 * NN_PARALLEL_THRESHOLD)
        for (int64_t i = 0; i < n; i++) memcpy(o + i * row, w + idx[i] * row, (size_t)row);
    } else {
        const int32_t *idx = tl_data(indices);
#pragma omp parallel for schedule(static) if (n * row > 4 * NN_PARALLEL_THRESHOLD)
        for (int64_t i = 0; i < n; i++) memcpy(o + i * row, w + (int64_t)idx[i] * row, (size_t)row);
    }
    return TL_OK;
}

/* The positions of src's rows grouped by index, in increasing position within a group:
   rows of index v are order[start[v] .. start[v + 1]). Arrays are the caller's to free. */
static tl_status group_by_index(const tl_tensor *indices, int64_t rows, int64_t **start_out,
                                int64_t **order_out) {
    const int64_t n = tl_numel(indices);
    int64_t *idx = indices_as_i64(indices, n);
    int64_t *start = calloc((size_t)rows + 2, sizeof *start);
    int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!idx || !start || !order) {
        free(idx), free(start), free(order);
        return tl_error(TL_ERR_MEMORY, "embedding_backward: out of memory grouping %lld indices",
                        (long long)n);
    }
    for (int64_t i = 0; i < n; i++) start[idx[i] + 2]++;
    for (int64_t v = 2; v < rows + 2; v++) start[v] += start[v - 1];
    /* start[v + 1] is now the first slot of index v: fill it, leaving start[v] as the first */
    for (int64_t i = 0; i < n; i++) order[start[idx[i] + 1]++] = i;
    free(idx);
    *start_out = start;
    *order_out = order;
    return TL_OK;
}

#define DEFINE_SCATTER_NATIVE(suffix, T)                                                           \
    static tl_status scatter_##suffix(tl_tensor *out, const tl_tensor *src,                        \
                                      const tl_tensor *indices) {                                  \
        const int64_t rows = out->shape[0], D = out->shape[1];                                     \
        if (rows == 0 || D == 0) return TL_OK; /* no loop over the rows of an empty out */         \
        int64_t *start, *order;                                                                    \
        TL_TRY(group_by_index(indices, rows, &start, &order));                                     \
        T *o = tl_data(out);                                                                       \
        const T *g = tl_data(src);                                                                 \
        const int64_t work = (rows + tl_numel(indices)) * D;                                       \
        NN_PARALLEL_FOR(work) for (int64_t v = 0; v < rows; v++) {                                 \
            T *acc = o + v * D;                                                                    \
            memset(acc, 0, (size_t)D * sizeof(T));                                                 \
            for (int64_t k = start[v]; k < start[v + 1]; k++) {                                    \
                const T *row = g + order[k] * D;                                                   \
                for (int64_t d = 0; d < D; d++) acc[d] += row[d];                                  \
            }                                                                                      \
        }                                                                                          \
        free(start), free(order);                                                                  \
        return TL_OK;                                                                              \
    }

DEFINE_SCATTER_NATIVE(f32, float)
DEFINE_SCATTER_NATIVE(f64, double)

/* 16-bit: each row sums in a float32 scratch row of its thread, rounded once. */
static tl_status scatter_16(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices,
                            bool bf16) {
    const int64_t rows = out->shape[0], D = out->shape[1];
    if (rows == 0 || D == 0) return TL_OK; /* no loop over the rows of an empty out */
    const int threads = nn_max_threads();
    float *scratch = malloc((size_t)threads * (size_t)(D + 1) * sizeof(float));
    if (!scratch)
        return tl_error(TL_ERR_MEMORY, "embedding_backward: out of memory for the float32 sums");
    int64_t *start, *order;
    tl_status status = group_by_index(indices, rows, &start, &order);
    if (status != TL_OK) {
        free(scratch);
        return status;
    }
    uint16_t *o = tl_data(out);
    const uint16_t *g = tl_data(src);
    const int64_t work = (rows + tl_numel(indices)) * D;
#pragma omp parallel for schedule(static) if (work > NN_PARALLEL_THRESHOLD)
    for (int64_t v = 0; v < rows; v++) {
        float *acc = scratch + (size_t)nn_thread_id() * (size_t)(D + 1);
        memset(acc, 0, (size_t)D * sizeof(float));
        uint16_t *dst = o + v * D;
        if (bf16) {
            for (int64_t k = start[v]; k < start[v + 1]; k++)
                for (int64_t d = 0; d < D; d++) acc[d] += tl_bf16_load(g[order[k] * D + d]);
            for (int64_t d = 0; d < D; d++) dst[d] = tl_bf16_round(acc[d]);
        } else {
            for (int64_t k = start[v]; k < start[v + 1]; k++)
                for (int64_t d = 0; d < D; d++) acc[d] += tl_f16_load(g[order[k] * D + d]);
            for (int64_t d = 0; d < D; d++) dst[d] = tl_f16_round(acc[d]);
        }
    }
    free(start), free(order), free(scratch);
    return TL_OK;
}

static tl_status scatter_bf16(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    return scatter_16(out, src, indices, true);
}

static tl_status scatter_f16(tl_tensor *out, const tl_tensor *src, const tl_tensor *indices) {
    return scatter_16(out, src, indices, false);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(embedding, TL_DTYPES_FLOATING, embedding, gather_rows),
    TL_KERNELS_FLOATING(embedding_backward, embedding, scatter),
};

TL_KERNEL_TABLE(tl_cpu_embedding_table, TL_DEVICE_CPU, entries);
