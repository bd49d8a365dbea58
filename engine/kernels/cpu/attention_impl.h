/* Internal to kernels/cpu/attention.c: the attention kernels written once for a compute type,
   included once per type with REAL (float or double), SFX(name) (a suffixed name), EXP, LOG and
   GEMM (kernels/cpu/attention.c's row-major gemm of that type) defined. */

/* One tile of scores: st [m, n] (ld BK) = scale q_tile [m, D] k_tile [n, D]^T, then each row i
   (query i0 + r) made into probabilities p = exp(st - lse_row) with the causal mask applied (0
   above the diagonal). Used by the backward, whose rows' lse is known. */
static void SFX(tile_probabilities)(REAL *st, const REAL *qt, const REAL *kt, const REAL *lse,
                                    int64_t m, int64_t n, int64_t D, int64_t i0, int64_t j0,
                                    const tl_attention_args *args) {
    GEMM(false, true, m, n, D, (REAL)args->scale, qt, D, kt, D, (REAL)0, st, BK);
    for (int64_t r = 0; r < m; r++) {
        REAL *row = st + r * BK;
        int64_t visible = args->causal ? i0 + r - j0 + 1 : n;
        if (visible > n) visible = n;
        if (visible < 0) visible = 0;
        for (int64_t c = 0; c < visible; c++) row[c] = EXP(row[c] - lse[r]);
        for (int64_t c = visible; c < n; c++) row[c] = 0;
    }
}

/* The forward of one (b, h, query block): an online softmax over the key blocks the block sees.
 */
static void SFX(forward_block)(const attention_problem *pb, tl_tensor *out, REAL *lse_bh, int64_t b,
                               int64_t h, int64_t i0, REAL *scratch) {
    const tl_attention_args *args = pb->args;
    const int64_t T = pb->T, S = pb->S, D = pb->D, m = T - i0 < BQ ? T - i0 : BQ;
    REAL *qt = scratch, *kt = qt + BQ * D, *vt = kt + BK * D, *acc = vt + BK * D;
    REAL *st = acc + BQ * D, *mx = st + BQ * BK, *l = mx + BQ;
    uint8_t keep[BK];
    const REAL keep_scale = (REAL)(1.0 / (1.0 - args->dropout));
    SFX(load)(qt, &pb->q, b, h, i0, m, D);
    for (int64_t r = 0; r < m; r++) mx[r] = (REAL)-INFINITY, l[r] = 0;
    memset(acc, 0, sizeof(REAL) * (size_t)(m * D));
    const int64_t key_end = args->causal && i0 + m < S ? i0 + m : S;
    for (int64_t j0 = 0; j0 < key_end; j0 += BK) {
        const int64_t n = key_end - j0 < BK ? key_end - j0 : BK;
        SFX(load)(kt, &pb->k, b, h, j0, n, D);
        SFX(load)(vt, &pb->v, b, h, j0, n, D);
        GEMM(false, true, m, n, D, (REAL)args->scale, qt, D, kt, D, (REAL)0, st, BK);
        for (int64_t r = 0; r < m; r++) {
            REAL *row = st + r * BK;
            const int64_t i = i0 + r;
            int64_t visible = args->causal ? i - j0 + 1 : n;
            if (visible > n) visible = n;
            if (visible <= 0) { /* this row sees none of the block's keys */
                memset(row, 0, sizeof(REAL) * (size_t)n);
                continue;
            }
            REAL top = mx[r];
            for (int64_t c = 0; c < visible; c++) top = row[c] > top ? row[c] : top;
            const REAL alpha = EXP(mx[r] - top); /* 0 for the first block (mx = -inf) */
            if (alpha != (REAL)1) {
                for (int64_t d = 0; d < D; d++) acc[r * D + d] *= alpha;
                l[r] *= alpha;
            }
            mx[r] = top;
            REAL sum = 0;
            for (int64_t c = 0; c < visible; c++) sum += row[c] = EXP(row[c] - top);
            for (int64_t c = visible; c < n; c++) row[c] = 0;
            l[r] += sum;
            if (args->dropout > 0) {
                dropout_keep(keep, pb, b, h, i, j0, visible);
                for (int64_t c = 0; c < visible; c++) row[c] = keep[c] ? row[c] * keep_scale : 0;
            }
        }
        GEMM(false, false, m, D, n, (REAL)1, st, BK, vt, D, (REAL)1, acc, D);
    }
    for (int64_t r = 0; r < m; r++) {
        const REAL inv = l[r] > 0 ? (REAL)1 / l[r] : (REAL)0;
        for (int64_t d = 0; d < D; d++) acc[r * D + d] *= inv;
        lse_bh[i0 + r] = l[r] > 0 ? mx[r] + LOG(l[r]) : (REAL)-INFINITY;
    }
    SFX(store)(out, acc, b, h, i0, m, D);
}

static tl_status SFX(forward)(tl_tensor *out, tl_tensor *lse, const attention_problem *pb) {
    const int64_t D = pb->D, blocks = (pb->T + BQ - 1) / BQ, tasks = pb->B * pb->H * blocks;
    const size_t per_thread = (size_t)((2 * BQ + 2 * BK) * D + BQ * BK + 2 * BQ);
    REAL *scratch = malloc(sizeof(REAL) * per_thread * (size_t)omp_get_max_threads());
    if (!scratch) return tl_error(TL_ERR_MEMORY, "scaled_dot_product_attention: out of memory");
    REAL *lse_data = tl_data(lse);
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t bh = task / blocks, i0 = task % blocks * BQ;
        SFX(forward_block)
        (pb, out, lse_data + bh * pb->T, bh / pb->H, bh % pb->H, i0,
         scratch + per_thread * (size_t)omp_get_thread_num());
    }
    free(scratch);
    return TL_OK;
}

/* The backward's shared step for one tile (query rows i0 .. i0 + m, keys j0 .. j0 + n):
   p [m, n] = the probabilities (recomputed from lse), pd = p with the dropout mask applied
   (what the forward multiplied v by; p itself without dropout), ds = p (dp~ - delta) with
   dp~ = (dO v^T) masked, the scores' gradient before the scale. */
typedef struct SFX(tiles) {
    REAL *qt, *dot, *kt, *vt, *p, *pd, *ds, *acc_a, *acc_b;
    REAL lse[BQ], delta[BQ];
} SFX(tiles);

static void SFX(backward_tile)(const attention_problem *pb, SFX(tiles) * w, int64_t b, int64_t h,
                               int64_t i0, int64_t m, int64_t j0, int64_t n) {
    const tl_attention_args *args = pb->args;
    const int64_t D = pb->D;
    const REAL keep_scale = (REAL)(1.0 / (1.0 - args->dropout));
    uint8_t keep[BK];
    SFX(tile_probabilities)(w->p, w->qt, w->kt, w->lse, m, n, D, i0, j0, args);
    GEMM(false, true, m, n, D, (REAL)1, w->dot, D, w->vt, D, (REAL)0, w->ds, BK); /* dO v^T */
    for (int64_t r = 0; r < m; r++) {
        REAL *p = w->p + r * BK, *pd = w->pd + r * BK, *ds = w->ds + r * BK;
        if (args->dropout > 0) {
            int64_t visible = args->causal ? i0 + r - j0 + 1 : n;
            visible = visible > n ? n : visible < 0 ? 0 : visible;
            dropout_keep(keep, pb, b, h, i0 + r, j0, visible);
            for (int64_t c = visible; c < n; c++) keep[c] = 0;
            for (int64_t c = 0; c < n; c++) {
                pd[c] = keep[c] ? p[c] * keep_scale : 0;
                ds[c] = p[c] * ((keep[c] ? ds[c] * keep_scale : 0) - w->delta[r]);
            }
        } else {
            for (int64_t c = 0; c < n; c++) ds[c] = p[c] * (ds[c] - w->delta[r]);
        }
    }
}

static void SFX(load_rows_state)(const attention_problem *pb, SFX(tiles) * w, const REAL *lse,
                                 const REAL *delta, int64_t b, int64_t h, int64_t i0, int64_t m) {
    SFX(load)(w->qt, &pb->q, b, h, i0, m, pb->D);
    SFX(load)(w->dot, &pb->grad_out, b, h, i0, m, pb->D);
    const int64_t at = (b * pb->H + h) * pb->T + i0;
    memcpy(w->lse, lse + at, sizeof(REAL) * (size_t)m);
    memcpy(w->delta, delta + at, sizeof(REAL) * (size_t)m);
}

/* dK and dV of one (b, h, key block), over the query blocks that see it. */
static void SFX(backward_keys)(const attention_problem *pb, SFX(tiles) * w, const REAL *lse,
                               const REAL *delta, int64_t b, int64_t h, int64_t j0,
                               tl_tensor *grad_k, tl_tensor *grad_v) {
    const int64_t T = pb->T, D = pb->D, n = pb->S - j0 < BK ? pb->S - j0 : BK;
    const REAL scale = (REAL)pb->args->scale;
    SFX(load)(w->kt, &pb->k, b, h, j0, n, D);
    SFX(load)(w->vt, &pb->v, b, h, j0, n, D);
    memset(w->acc_a, 0, sizeof(REAL) * (size_t)(n * D));
    memset(w->acc_b, 0, sizeof(REAL) * (size_t)(n * D));
    const int64_t first = pb->args->causal ? j0 / BQ * BQ : 0; /* rows i >= j0 see key j0 */
    for (int64_t i0 = first; i0 < T; i0 += BQ) {
        const int64_t m = T - i0 < BQ ? T - i0 : BQ;
        SFX(load_rows_state)(pb, w, lse, delta, b, h, i0, m);
        SFX(backward_tile)(pb, w, b, h, i0, m, j0, n);
        if (grad_v) /* dV += pd^T dO (pd is p without dropout) */
            GEMM(true, false, n, D, m, (REAL)1, pb->args->dropout > 0 ? w->pd : w->p, BK, w->dot, D,
                 (REAL)1, w->acc_b, D);
        if (grad_k) /* dK += scale ds^T q */
            GEMM(true, false, n, D, m, scale, w->ds, BK, w->qt, D, (REAL)1, w->acc_a, D);
    }
    if (grad_k) SFX(store)(grad_k, w->acc_a, b, h, j0, n, D);
    if (grad_v) SFX(store)(grad_v, w->acc_b, b, h, j0, n, D);
}

/* dQ of one (b, h, query block), over the key blocks it sees. */
static void SFX(backward_queries)(const attention_problem *pb, SFX(tiles) * w, const REAL *lse,
                                  const REAL *delta, int64_t b, int64_t h, int64_t i0,
                                  tl_tensor *grad_q) {
    const int64_t D = pb->D, m = pb->T - i0 < BQ ? pb->T - i0 : BQ;
    const REAL scale = (REAL)pb->args->scale;
    SFX(load_rows_state)(pb, w, lse, delta, b, h, i0, m);
    memset(w->acc_a, 0, sizeof(REAL) * (size_t)(m * D));
    const int64_t key_end = pb->args->causal && i0 + m < pb->S ? i0 + m : pb->S;
    for (int64_t j0 = 0; j0 < key_end; j0 += BK) {
        const int64_t n = key_end - j0 < BK ? key_end - j0 : BK;
        SFX(load)(w->kt, &pb->k, b, h, j0, n, D);
        SFX(load)(w->vt, &pb->v, b, h, j0, n, D);
        SFX(backward_tile)(pb, w, b, h, i0, m, j0, n);
        GEMM(false, false, m, D, n, scale, w->ds, BK, w->kt, D, (REAL)1, w->acc_a, D);
    }
    SFX(store)(grad_q, w->acc_a, b, h, i0, m, D);
}

/* Carves one thread's scratch (see SFX(backward)'s per_thread) into w's tiles. */
static void SFX(carve)(SFX(tiles) * w, REAL *s, int64_t D) {
    w->qt = s, w->dot = w->qt + BQ * D, w->kt = w->dot + BQ * D, w->vt = w->kt + BK * D;
    w->p = w->vt + BK * D, w->pd = w->p + BQ * BK, w->ds = w->pd + BQ * BK;
    w->acc_a = w->ds + BQ * BK, w->acc_b = w->acc_a + ROWS_MAX * D;
}

static tl_status SFX(backward)(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v,
                               tl_tensor *delta_t, const tl_tensor *lse_t,
                               const attention_problem *pb) {
    const int64_t B = pb->B, H = pb->H, T = pb->T, S = pb->S, D = pb->D;
    const int64_t q_blocks = (T + BQ - 1) / BQ, k_blocks = (S + BK - 1) / BK;
    const size_t per_thread = (size_t)((2 * BQ + 2 * BK) * D + 3 * BQ * BK + 2 * ROWS_MAX * D);
    REAL *scratch = malloc(sizeof(REAL) * per_thread * (size_t)omp_get_max_threads());
    if (!scratch) return tl_error(TL_ERR_MEMORY, "scaled_dot_product_attention: out of memory");
    const REAL *lse = tl_data(lse_t);
    REAL *delta = tl_data(delta_t);
    /* delta = rowsum(dO * O), from the forward's (rounded) output */
    const int64_t row_tasks = B * H * q_blocks;
#pragma omp parallel for schedule(static) if (row_tasks > 1)
    for (int64_t task = 0; task < row_tasks; task++) {
        const int64_t bh = task / q_blocks, i0 = task % q_blocks * BQ;
        const int64_t m = T - i0 < BQ ? T - i0 : BQ;
        REAL *o = scratch + per_thread * (size_t)omp_get_thread_num(), *g = o + BQ * D;
        SFX(load)(o, &pb->out, bh / H, bh % H, i0, m, D);
        SFX(load)(g, &pb->grad_out, bh / H, bh % H, i0, m, D);
        for (int64_t r = 0; r < m; r++) {
            REAL s = 0;
            for (int64_t d = 0; d < D; d++) s += o[r * D + d] * g[r * D + d];
            delta[bh * T + i0 + r] = s;
        }
    }
    if (grad_k || grad_v) {
        const int64_t tasks = B * H * k_blocks;
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t bh = task / k_blocks, j0 = task % k_blocks * BK;
            SFX(tiles) w;
            SFX(carve)(&w, scratch + per_thread * (size_t)omp_get_thread_num(), D);
            SFX(backward_keys)(pb, &w, lse, delta, bh / H, bh % H, j0, grad_k, grad_v);
        }
    }
    if (grad_q) {
        const int64_t tasks = B * H * q_blocks;
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t bh = task / q_blocks, i0 = task % q_blocks * BQ;
            SFX(tiles) w;
            SFX(carve)(&w, scratch + per_thread * (size_t)omp_get_thread_num(), D);
            SFX(backward_queries)(pb, &w, lse, delta, bh / H, bh % H, i0, grad_q);
        }
    }
    free(scratch);
    return TL_OK;
}
