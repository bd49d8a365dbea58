/* The floor under a tiny CUDA op and its parts, in microseconds per call: an empty kernel, a
   1-element add kernel, cudaGetDevice, allocating and releasing a 1-element CUDA tensor, and
   tl_add of two 1-element CUDA tensors from C; prints "key value" lines. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tlua/tlua.h"

__global__ void empty_kernel() {}
__global__ void add_one_kernel(float *out, const float *a, const float *b) {
    out[0] = a[0] + b[0];
}

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

static int launch_empty_legacy(void *ctx) {
    (void)ctx;
    empty_kernel<<<1, 1>>>();
    return cudaPeekAtLastError() != cudaSuccess;
}

typedef struct {
    CUfunction fn;
    CUstream stream;
} driver_ctx;

static int launch_empty_driver(void *ctx) {
    driver_ctx *d = (driver_ctx *)ctx;
    return cuLaunchKernel(d->fn, 1, 1, 1, 1, 1, 1, 0, d->stream, NULL, NULL) != CUDA_SUCCESS;
}

typedef struct {
    tl_tensor *a, *b, *out;
    cudaStream_t stream;
} add_ctx;

static int launch_add_one(void *p) {
    add_ctx *c = (add_ctx *)p;
    add_one_kernel<<<1, 1, 0, c->stream>>>((float *)tl_data(c->out), (const float *)tl_data(c->a),
                                           (const float *)tl_data(c->b));
    return cudaPeekAtLastError() != cudaSuccess;
}

static int get_device(void *p) {
    (void)p;
    int device;
    return cudaGetDevice(&device) != cudaSuccess;
}

static int alloc_release(void *p) {
    add_ctx *c = (add_ctx *)p;
    tl_tensor *t;
    if (tl_empty_like(c->a, &t) != TL_OK) return 1;
    tl_release(t);
    return 0;
}

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
    printf("empty_launch_legacy_stream_us %.3f\n", time_us(launch_empty_legacy, NULL));
    driver_ctx d;
    d.stream = (CUstream)stream;
    if (cudaGetFuncBySymbol(&d.fn, (const void *)empty_kernel) == cudaSuccess)
        printf("empty_launch_driver_us %.3f\n", time_us(launch_empty_driver, &d));

    tl_device cuda;
    cuda.type = TL_DEVICE_CUDA;
    cuda.index = 0;
    int64_t shape[1] = {1};
    add_ctx c = {NULL, NULL, NULL, stream};
    if (tl_ones(shape, 1, TL_F32, cuda, &c.a) != TL_OK ||
        tl_ones(shape, 1, TL_F32, cuda, &c.b) != TL_OK ||
        tl_ones(shape, 1, TL_F32, cuda, &c.out) != TL_OK) {
        fprintf(stderr, "cuda_launch: %s\n", tl_last_error());
        return 1;
    }
    printf("add_one_kernel_us %.3f\n", time_us(launch_add_one, &c));
    printf("get_device_us %.3f\n", time_us(get_device, &c));
    printf("alloc_release_us %.3f\n", time_us(alloc_release, &c));
    printf("c_tiny_add_us %.3f\n", time_us(add_tiny, &c));
    tl_release(c.a);
    tl_release(c.b);
    tl_release(c.out);
    return 0;
}
