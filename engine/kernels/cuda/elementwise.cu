/* The paths of the CUDA elementwise launch (kernels/cuda/elementwise.cuh), registered once for
   every kernel that runs it (unary, binary, activation backward, cast). */
#include "kernels/cuda/elementwise.cuh"

/* in the order of elementwise.cuh's TL_EW_* */
extern "C" const tl_kernel_variant tl_cuda_elementwise_paths[4] = {
    TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "dense_vector",
                    "every operand contiguous (or a broadcast scalar) and "
                    "16-byte aligned: flat, 16 bytes per access"),
    TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "dense_scalar",
                    "every operand contiguous, one not 16-byte aligned: "
                    "flat, one element per access"),
    TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "rows_vector",
                    "not contiguous; the row width and the rows of every "
                    "unit-stride operand fit 16-byte accesses: by rows, "
                    "vectors where the inner stride is 1"),
    TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "rows_scalar",
                    "not contiguous, rows not fit for 16-byte accesses: "
                    "by rows, one element per access"),
};
TL_VARIANT_TABLE(tl_cuda_elementwise_variants, TL_DEVICE_CUDA, tl_cuda_elementwise_paths);
