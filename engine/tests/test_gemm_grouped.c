/* C unit test of tl_gemm_grouped, the GEMM layer's grouped entry point: column-major problems of
   free sizes and transposes against a double loop, problems with a zero size left untouched,
   validation errors naming the group; on the CPU and, when present, on CUDA. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gemm.h"
#include "tlua/tlua.h"

#include "check.h"

static const tl_device CUDA0 = {.type = TL_DEVICE_CUDA, .index = 0};

enum { GROUPS = 5, CAP = 64 };

/* problem g: m, n, k, trans_a, trans_b; the last has k = 0 and must leave C alone */
static const int SIZES[GROUPS][5] = {
    {3, 4, 5, 0, 0}, {1, 6, 2, 1, 0}, {4, 1, 3, 0, 1}, {2, 2, 7, 1, 1}, {3, 2, 0, 0, 0}};

static double value(int g, int which, int i) {
    return sin(1.0 + 0.37 * g + 0.11 * which + 0.013 * i * (which + 1));
}

/* C = op(A) op(B) in double, column-major with the tight leading dims used below */
static double expected(int g, int i, int j) {
    int m = SIZES[g][0], k = SIZES[g][2];
    bool ta = SIZES[g][3], tb = SIZES[g][4];
    double sum = 0;
    for (int p = 0; p < k; p++) {
        double a = ta ? value(g, 0, i * k + p) : value(g, 0, p * m + i);
        int n = SIZES[g][1];
        double b = tb ? value(g, 1, p * n + j) : value(g, 1, j * k + p);
        sum += a * b;
    }
    return sum;
}

/* a float64 host vector of n values, then in dtype on device */
static tl_tensor *make(const double *values, int64_t n, tl_dtype dtype, tl_device device) {
    tl_tensor *host = NULL, *out = NULL;
    OK(tl_empty(&n, 1, TL_F64, TL_CPU, &host));
    if (!host) return NULL;
    memcpy(tl_data(host), values, sizeof(double) * (size_t)n);
    OK(tl_to(host, dtype, device, &out));
    tl_release(host);
    return out;
}

static void run(tl_device device, tl_dtype dtype, double tolerance) {
    tl_tensor *a[GROUPS], *b[GROUPS], *c[GROUPS];
    GemmGroup groups[GROUPS];
    for (int g = 0; g < GROUPS; g++) {
        int m = SIZES[g][0], n = SIZES[g][1], k = SIZES[g][2];
        bool ta = SIZES[g][3], tb = SIZES[g][4];
        double ha[CAP], hb[CAP], hc[CAP];
        for (int i = 0; i < CAP; i++) ha[i] = value(g, 0, i), hb[i] = value(g, 1, i), hc[i] = 42;
        int64_t na = (int64_t)m * k > 0 ? (int64_t)m * k : 1, nb = (int64_t)k * n > 0 ? k * n : 1;
        int64_t nc = (int64_t)m * n;
        a[g] = make(ha, na, dtype, device);
        b[g] = make(hb, nb, dtype, device);
        c[g] = make(hc, nc, dtype, device);
        if (!a[g] || !b[g] || !c[g]) return;
        groups[g] = (GemmGroup){.trans_a = ta,
                                .trans_b = tb,
                                .m = m,
                                .n = n,
                                .k = k,
                                .lda = ta ? (k > 1 ? k : 1) : m,
                                .ldb = tb ? n : (k > 1 ? k : 1),
                                .ldc = m,
                                .a = tl_data(a[g]),
                                .b = tl_data(b[g]),
                                .c = tl_data(c[g])};
    }
    GemmGroupedParams p = tl_gemm_grouped_params(GROUPS, groups, dtype);
    OK(tl_gemm_grouped(TL_OP_grouped_matmul, device, &p));
    for (int g = 0; g < GROUPS; g++) {
        int m = SIZES[g][0], n = SIZES[g][1];
        double got[CAP];
        tl_tensor *host;
        OK(tl_to(c[g], TL_F64, TL_CPU, &host));
        memcpy(got, tl_data(host), sizeof(double) * (size_t)(m * n));
        tl_release(host);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double want = SIZES[g][2] == 0 ? 42 : expected(g, i, j);
                CHECK(fabs(got[j * m + i] - want) <= tolerance * (1 + fabs(want)),
                      "%s group %d C[%d, %d]: got %g, expected %g", tl_dtype_name(dtype), g, i, j,
                      got[j * m + i], want);
            }
    }

    /* a bad leading dim in group 4: an error naming it, nothing run */
    groups[3].lda = 1;
    CHECK(tl_gemm_grouped(TL_OP_grouped_matmul, device, &p) == TL_ERR_ARGUMENT,
          "a too small lda is refused");
    CHECK(strstr(tl_last_error(), "grouped_matmul") && strstr(tl_last_error(), "group 4 of 5"),
          "the error names the op and the group: %s", tl_last_error());
    p.output_dtype = TL_I32;
    CHECK(tl_gemm_grouped(TL_OP_grouped_matmul, device, &p) == TL_ERR_DTYPE,
          "an int32 output is refused: %s", tl_last_error());
    for (int g = 0; g < GROUPS; g++) tl_release(a[g]), tl_release(b[g]), tl_release(c[g]);
}

int main(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    const double tolerances[] = {1e-12, 1e-5, 2e-2, 4e-3};
    for (int i = 0; i < 4; i++) run(TL_CPU, dtypes[i], tolerances[i]);
    if (tl_cuda_device_count() > 0)
        for (int i = 0; i < 4; i++) run(CUDA0, dtypes[i], tolerances[i] * 2);
    CHECK(tl_gemm_grouped(TL_OP_grouped_matmul, TL_CPU, NULL) == TL_ERR_ARGUMENT, "no params");
    GemmGroupedParams none = {.group_count = 2, .groups = NULL};
    CHECK(tl_gemm_grouped(TL_OP_grouped_matmul, TL_CPU, &none) == TL_ERR_ARGUMENT, "no list");
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
