/* Threads (OpenBLAS and OpenMP) and the monotonic clock. */
#include <omp.h>
#include <time.h>

#include "tlua/runtime.h"

void openblas_set_num_threads(int num_threads);

static int num_threads = 0; /* 0: not set, use OpenMP's default */

tl_status tl_set_num_threads(int n) {
    if (n < 1) return tl_error(TL_ERR_ARGUMENT, "set_num_threads: expected n >= 1, got %d", n);
    num_threads = n;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return TL_OK;
}

int tl_get_num_threads(void) {
    return num_threads > 0 ? num_threads : omp_get_max_threads();
}

double tl_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
