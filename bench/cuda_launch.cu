/* The floor under a tiny CUDA op: an empty kernel launched in a loop, then tl_add of two
   1-element CUDA tensors from C, in microseconds per op; prints "key value" lines. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tlua/tlua.h"

__global__ void empty_kernel() {}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { REPEATS = 9, INNER = 20000 };

/* microseconds per call of step: the median of REPEATS timings of INNER calls, each from a
   synchronized start to a synchronized end */
static double time_us(int (*step)(void *), void *ctx) {
    double samples[REPEATS];
    for (int r = -1; r < REPEATS; r++) {
        cudaDeviceSynchronize();
        double t0 = now();
        for (int i = 0; i < INNER; i++)
            if (step(ctx) != 0) return -1;
        cudaDeviceSynchronize();
        if (r >= 0) samples[r] = (now() - t0) / INNER * 1e6;
    }
    qsort(samples, REPEATS, sizeof *samples, compare);
    return samples[REPEATS / 2];
}

static int launch_empty(void *ctx) {
    empty_kernel<<<1, 1, 0, *(cudaStream_t *)ctx>>>();
    return cudaPeekAtLastError() != cudaSuccess;
}

typedef struct {
    tl_tensor *a, *b;
} add_ctx;

static int add_tiny(void *p) {
    add_ctx *c = (add_ctx *)p;
    tl_tensor *out;
    if (tl_add(c->a, c->b, &out) != TL_OK) return 1;
    tl_release(out);
    return 0;
}

int main(void) {
    if (tl_cuda_device_count() == 0) {
        fprintf(stderr, "cuda_launch: no CUDA device\n");
        return 1;
    }
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    printf("empty_launch_us %.3f\n", time_us(launch_empty, &stream));

    tl_device cuda;
    cuda.type = TL_DEVICE_CUDA;
    cuda.index = 0;
    int64_t shape[1] = {1};
    add_ctx c = {NULL, NULL};
    if (tl_ones(shape, 1, TL_F32, cuda, &c.a) != TL_OK ||
        tl_ones(shape, 1, TL_F32, cuda, &c.b) != TL_OK) {
        fprintf(stderr, "cuda_launch: %s\n", tl_last_error());
        return 1;
    }
    printf("c_tiny_add_us %.3f\n", time_us(add_tiny, &c));
    tl_release(c.a);
    tl_release(c.b);
    return 0;
}
