/* Benchmark, not a test: a float32 n x n matmul from C, its time and GFLOP/s. */
#include <stdio.h>
#include <stdlib.h>

#include "tlua/tlua.h"

/* usage: bench_matmul_speed [n = 1024] [repeats = 5] */
int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 1024;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: %s [n >= 1] [repeats >= 1]\n", argv[0]);
        return 2;
    }
    const int64_t shape[] = {n, n};
    tl_tensor *a = NULL, *b = NULL, *out = NULL;
    tl_manual_seed(1);
    if (tl_randn(shape, 2, TL_F32, TL_CPU, &a) != TL_OK ||
        tl_randn(shape, 2, TL_F32, TL_CPU, &b) != TL_OK ||
        tl_matmul(a, b, &out) != TL_OK) { /* also warms up OpenBLAS's threads */
        fprintf(stderr, "matmul_speed: %s\n", tl_last_error());
        return 1;
    }
    tl_release(out);
    double start = tl_clock();
    for (int i = 0; i < reps; i++) {
        out = NULL;
        if (tl_matmul(a, b, &out) != TL_OK) {
            fprintf(stderr, "matmul_speed: %s\n", tl_last_error());
            return 1;
        }
        tl_release(out);
    }
    double seconds = (tl_clock() - start) / reps;
    printf("matmul %lld^3 float32: %.2f ms, %.1f GFLOP/s\n", (long long)n, seconds * 1e3,
           2.0 * (double)n * (double)n * (double)n / seconds * 1e-9);
    tl_release(a);
    tl_release(b);
    return 0;
}
