/* Internal: the CPU GEMM kernels' epilogues (kernels/cpu/gemm_epilogue.c), for kernels/cpu/gemm.c.
 */
#ifndef TLUA_CPU_GEMM_EPILOGUE_H
#define TLUA_CPU_GEMM_EPILOGUE_H

#include "kernels/gemm.h"

/* p->epilogue (bias, gelu_aux or dgelu; bgradb has nothing to do here) applied to the float32
   product c (m x n, ldc apart) before it is stored in p's output dtype; bias and aux have that
   dtype. */
void tl_cpu_gemm_epilogue_f32(const GemmParams *p, float *c, int64_t ldc);
/* The same for float64 C (p->ldc apart), bias and aux. */
void tl_cpu_gemm_epilogue_f64(const GemmParams *p, double *c);
/* bgradb's sums of op(B)'s k rows into bias_grad; nothing for other epilogues. */
void tl_cpu_gemm_bias_grad(const GemmParams *p, const void *b);

#endif
