/* Internal: the CUDA GEMM kernel's epilogues (kernels/gemm.h): cuBLASLt's fused ones
   (gemm_lt.c) and the kernels applying them after a plain product (gemm_epilogue.cu). */
#ifndef TLUA_CUDA_GEMM_EPILOGUE_H
#define TLUA_CUDA_GEMM_EPILOGUE_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/gemm.h"

/* Whether cuBLASLt may run p with its epilogue: a single product of float32, bfloat16 or float16
   inputs with m, n and k nonzero, every matrix, vector and leading dimension 16-byte aligned. */
bool tl_cuda_gemm_lt_eligible(const GemmParams *p, const void *a, const void *b, const void *c);
/* p with its epilogue in one cublasLtMatmul; *ran false (TL_OK) when cuBLASLt has no kernel for
   it, and nothing was queued. */
tl_status tl_cuda_gemm_lt(tl_device device, const GemmParams *p, const void *a, const void *b,
                          void *c, bool *ran);
/* p's epilogue applied to the product already in c (bias, gelu_aux, dgelu), or bgradb's sums of
   op(B), by kernels on the device's stream. */
tl_status tl_cuda_gemm_epilogue(tl_device device, const GemmParams *p, const void *b, void *c);

#ifdef __cplusplus
}
#endif

#endif
