/* CUDA random kernels (rand, randn, randint), the C side: the dtypes of cpu/random.c; the
   streams are the CPU's, element for element (cuda/random.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status run(const char *op, int kind, tl_tensor *out, const tl_op_args *args) {
    tl_cuda_random r = {
        .kind = kind,
        .dtype = (int)out->dtype,
        .out = tl_data(out),
        .n = tl_numel(out),
        .seed = args->seed,
        .counter = args->counter,
    };
    if (kind == TL_CUDA_RANDINT) {
        int64_t low = (int64_t)args->scalar[0], high = (int64_t)args->scalar[1];
        r.low = low;
        r.range = (uint64_t)high - (uint64_t)low;
    }
    if (r.n == 0) return TL_OK;
    if (!tl_is_contiguous(out))
        return tl_error(TL_ERR_ARGUMENT, "%s: the CUDA kernel needs a contiguous output", op);
    TL_TRY(tl_cuda_where_of(out, op, &r.at));
    return tl_cuda_random_run(&r);
}

static tl_status rand_kernel(tl_tensor *out, const tl_op_args *args) {
    return run("rand", TL_CUDA_RAND, out, args);
}

static tl_status randn_kernel(tl_tensor *out, const tl_op_args *args) {
    return run("randn", TL_CUDA_RANDN, out, args);
}

static tl_status randint_kernel(tl_tensor *out, const tl_op_args *args) {
    return run("randint", TL_CUDA_RANDINT, out, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(rand, TL_DTYPES_FLOATING, random, rand_kernel),
    TL_KERNEL(randn, TL_DTYPES_FLOATING, random, randn_kernel),
    TL_KERNEL(randint, TL_DTYPES_NUMERIC, random, randint_kernel),
};

TL_KERNEL_TABLE(tl_cuda_random_table, TL_DEVICE_CUDA, entries);
