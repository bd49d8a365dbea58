/* tl_matmul (torch.matmul's rules) as one GemmParams: row-major out = A B is computed as the
   column-major C^T = B^T A^T, reading strided operands in place where BLAS can. */
#include "kernels/gemm.h"
#include "ops/matmul.h"
#include "tlua/ops.h"

static int64_t at_least_one(int64_t v) {
    return v > 1 ? v : 1;
}

/* One operand as GEMM sees it: a matrix (a 1-D one is [1, K] on the left, [K, 1] on
   the right) with a BLAS layout, and one stride from batch to batch. */
typedef struct operand {
    tl_tensor *t; /* the tensor read (the argument or a contiguous copy), owned */
    int64_t rows, cols;
    bool col_major;
    int64_t ld, batch_stride;
} operand;

static void matrix_dims(const tl_tensor *t, bool left, int64_t *rows, int64_t *cols, int64_t *rs,
                        int64_t *cs) {
    if (t->ndim == 1) {
        *rows = left ? 1 : t->shape[0];
        *cols = left ? t->shape[0] : 1;
        *rs = left ? at_least_one(t->shape[0]) : t->strides[0];
        *cs = left ? t->strides[0] : 1;
    } else {
        *rows = t->shape[t->ndim - 2];
        *cols = t->shape[t->ndim - 1];
        *rs = t->strides[t->ndim - 2];
        *cs = t->strides[t->ndim - 1];
    }
}

/* The single stride S with which t's batch dims, broadcast to batch[0..nbatch), advance
   (batch index i at offset i * S), if there is one. */
static bool batch_stride(const tl_tensor *t, const int64_t *batch, int nbatch, int64_t *out) {
    int nb = t->ndim > 2 ? t->ndim - 2 : 0;
    int64_t stride = 0, inner = 1; /* inner: batches per step of dim i */
    bool known = false;
    for (int i = nbatch - 1; i >= 0; i--) {
        if (batch[i] == 1) continue;
        int src = i - (nbatch - nb);
        int64_t s = src >= 0 && t->shape[src] != 1 ? t->strides[src] : 0; /* 0: broadcast */
        if (!known)
            stride = s, known = true; /* the innermost batch dim that varies */
        else if (s != stride * inner)
            return false;
        inner *= batch[i];
    }
    *out = stride;
    return true;
}

static bool describe(operand *op, bool left, const int64_t *batch, int nbatch) {
    int64_t rs, cs;
    matrix_dims(op->t, left, &op->rows, &op->cols, &rs, &cs);
    return tl_gemm_layout(op->rows, op->cols, rs, cs, &op->col_major, &op->ld) &&
           batch_stride(op->t, batch, nbatch, &op->batch_stride);
}

/* Sets up op for t; when the strides cannot be read in place, reads a contiguous copy of
   t broadcast to the batch dims. */
static tl_status prepare(const tl_tensor *t, bool left, const int64_t *batch, int nbatch,
                         operand *op) {
    op->t = tl_retain((tl_tensor *)t);
    if (describe(op, left, batch, nbatch)) return TL_OK;
    tl_tensor *source = NULL, *copy = NULL;
    tl_status status = TL_OK;
    if (t->ndim > 2) {
        int64_t shape[TL_MAX_DIMS];
        for (int i = 0; i < nbatch; i++) shape[i] = batch[i];
        shape[nbatch] = t->shape[t->ndim - 2];
        shape[nbatch + 1] = t->shape[t->ndim - 1];
        status = tl_expand(op->t, shape, nbatch + 2, &source);
    } else {
        source = tl_retain(op->t);
    }
    if (status == TL_OK) {
        status = tl_clone(source, &copy);
        tl_release(source);
    }
    tl_release(op->t);
    op->t = copy;
    if (status != TL_OK) return status;
    if (!describe(op, left, batch, nbatch))
        return tl_error(TL_ERR_RUNTIME, "matmul: internal error, a contiguous operand has no "
                                        "BLAS layout");
    return TL_OK;
}

/* Whether a's batch dims and rows merge into one row-major dim of rows
   (a[B..., M, K] read as [B * M, K]), and that dim's row stride. */
static bool fold_rows(const tl_tensor *a, int64_t *rows, int64_t *ld) {
    if (a->ndim < 3) return false;
    int n = a->ndim - 1; /* dims 0 .. n-1: batch dims and rows */
    int64_t cols = a->shape[n], size = 1, stride = 0;
    if (cols > 1 && a->strides[n] != 1) return false;
    int inner = -1; /* the innermost dim of size > 1 seen so far */
    for (int d = n - 1; d >= 0; d--) {
        size *= a->shape[d];
        if (a->shape[d] == 1) continue;
        if (inner < 0)
            stride = a->strides[d];
        else if (a->strides[d] != a->strides[inner] * a->shape[inner])
            return false;
        inner = d;
    }
    if (inner < 0) stride = at_least_one(cols);
    if (size > 1 && stride < at_least_one(cols)) return false;
    *rows = size;
    *ld = size > 1 ? stride : at_least_one(cols);
    return true;
}

static tl_status check_args(const char *name, const tl_tensor *a, const tl_tensor *b) {
    if (a->ndim == 0 || b->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: both arguments need at least 1 dim, got %d and %d dims",
                        name, a->ndim, b->ndim);
    if (!tl_device_equal(tl_tensor_device(a), tl_tensor_device(b))) {
        char da[16], db[16];
        return tl_error(TL_ERR_DEVICE, "%s: expected both arguments on one device, got %s and %s",
                        name, tl_device_name(tl_tensor_device(a), da),
                        tl_device_name(tl_tensor_device(b), db));
    }
    if (a->dtype != b->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: expected both arguments of one dtype, got %s and %s",
                        name, tl_dtype_name(a->dtype), tl_dtype_name(b->dtype));
    if (!tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(a->dtype));
    int64_t ka = a->shape[a->ndim - 1];
    int kb_dim = b->ndim == 1 ? 0 : b->ndim - 2;
    int64_t kb = b->shape[kb_dim];
    if (ka != kb) {
        char sa[256], sb[256];
        return tl_error(TL_ERR_SHAPE,
                        "%s: size mismatch, got %s @ %s (dim %d of the first is %lld, dim %d of "
                        "the second is %lld)",
                        name, tl_shape_str(a, sa, sizeof sa), tl_shape_str(b, sb, sizeof sb),
                        a->ndim, (long long)ka, kb_dim + 1, (long long)kb);
    }
    return TL_OK;
}

/* The broadcast batch dims of a and b (everything before the last two dims). */
static tl_status batch_shape(const char *name, const tl_tensor *a, const tl_tensor *b,
                             int64_t *batch, int *nbatch) {
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nb = b->ndim > 2 ? b->ndim - 2 : 0;
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int da = i - (n - na), db = i - (n - nb);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char sa_str[256], sb_str[256];
            return tl_error(TL_ERR_SHAPE,
                            "%s: batch dims cannot be broadcast, got %s @ %s (size %lld vs %lld "
                            "at batch dim %d)",
                            name, tl_shape_str(a, sa_str, sizeof sa_str),
                            tl_shape_str(b, sb_str, sizeof sb_str), (long long)sa, (long long)sb,
                            i + 1);
        }
        batch[i] = sa == 1 ? sb : sa;
    }
    *nbatch = n;
    return TL_OK;
}

static tl_status run_gemm(tl_op op, operand *a, operand *b, int64_t batch_count, tl_tensor *out) {
    int64_t m = b->cols, n = a->rows, k = a->cols;
    /* C^T[N x M] = B^T A^T: GEMM's A is the user's b, GEMM's B the user's a. A row-major
       operand is already its own transpose in column-major terms. */
    if (batch_count == 0) return TL_OK; /* an empty batch: nothing to compute */
    GemmParams p = {
        .trans_a = b->col_major,
        .trans_b = a->col_major,
        .m = m,
        .n = n,
        .k = k,
        .alpha = 1.0f,
        .beta = 0.0f,
        .lda = b->ld,
        .ldb = a->ld,
        .ldc = at_least_one(m),
        .batch_count = batch_count,
        .stride_a = b->batch_stride,
        .stride_b = a->batch_stride,
        .stride_c = m * n,
        .input_dtype = out->dtype,
        .output_dtype = out->dtype,
        .compute_dtype = tl_gemm_compute_dtype(out->dtype),
    };
    return tl_gemm(op, tl_tensor_device(out), &p, tl_data(b->t), tl_data(a->t), tl_data(out));
}

tl_status tl_matmul_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(check_args(name, a, b));
    int64_t batch[TL_MAX_DIMS];
    int nbatch = 0;
    TL_TRY(batch_shape(name, a, b, batch, &nbatch));

    int64_t shape[TL_MAX_DIMS], batch_count = 1;
    int ndim = 0;
    for (int i = 0; i < nbatch; i++) batch_count *= (shape[ndim++] = batch[i]);
    if (a->ndim > 1) shape[ndim++] = a->shape[a->ndim - 2];
    if (b->ndim > 1) shape[ndim++] = b->shape[b->ndim - 1];
    tl_tensor *result;
    TL_TRY(tl_empty(shape, ndim, a->dtype, tl_tensor_device(a), &result));
    if (tl_numel(result) == 0) {
        *out = result;
        return TL_OK;
    }

    tl_status status;
    operand left = {0}, right = {0};
    int64_t rows, ld;
    if (b->ndim <= 2 && fold_rows(a, &rows, &ld)) {
        /* a[B..., M, K] @ b[K, N]: one GEMM with B * M rows, no batch */
        left = (operand){
            .t = tl_retain((tl_tensor *)a), .rows = rows, .cols = a->shape[a->ndim - 1], .ld = ld};
        status = prepare(b, false, NULL, 0, &right);
        batch_count = 1;
    } else {
        status = prepare(a, true, batch, nbatch, &left);
        if (status == TL_OK) status = prepare(b, false, batch, nbatch, &right);
    }
    if (status == TL_OK) status = run_gemm(op, &left, &right, batch_count, result);
    tl_release(left.t);
    tl_release(right.t);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_matmul(const tl_tensor *a, const tl_tensor *b, tl_tensor **out) {
    return tl_matmul_as(TL_OP_matmul, a, b, out);
}

tl_status tl_matmul_into_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor *out) {
    operand left = {0}, right = {0};
    tl_status status = prepare(a, true, NULL, 0, &left);
    if (status == TL_OK) status = prepare(b, false, NULL, 0, &right);
    if (status == TL_OK) status = run_gemm(op, &left, &right, 1, out);
    tl_release(left.t);
    tl_release(right.t);
    return status;
}
