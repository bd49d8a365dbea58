/* The CPU GEMM kernels' epilogues (kernels/gemm.h): bias, GELU with its input kept, GELU's
   derivative and the bias gradient, applied to the product in its compute type before it is
   stored, as cuBLASLt applies them. */
#include "kernels/cpu/gemm_epilogue.h"
#include "kernels/cpu/convert.h"
#include "kernels/pointwise.h"

/* Element i of a vector or matrix of the output dtype (float32, bfloat16 or float16) as float */
static float load(tl_dtype dtype, const void *v, int64_t i) {
    switch (dtype) {
    case TL_BF16:
        return tl_bf16_load(((const uint16_t *)v)[i]);
    case TL_F16:
        return tl_f16_load(((const uint16_t *)v)[i]);
    default:
        return ((const float *)v)[i];
    }
}

static void store(tl_dtype dtype, void *v, int64_t i, float x) {
    switch (dtype) {
    case TL_BF16:
        ((uint16_t *)v)[i] = tl_bf16_round(x);
        break;
    case TL_F16:
        ((uint16_t *)v)[i] = tl_f16_round(x);
        break;
    default:
        ((float *)v)[i] = x;
    }
}

/* Column j of C (ldc apart), row i: bias adds bias[i]; gelu_aux keeps the biased product in
   aux and stores gelu of it; dgelu scales by gelu' of aux. */
void tl_cpu_gemm_epilogue_f32(const GemmParams *p, float *c, int64_t ldc) {
    const GemmEpilogue *e = p->epilogue;
    const tl_dtype dtype = p->output_dtype;
    if (e->kind == TL_GEMM_EPILOGUE_BGRADB) return;
#pragma omp parallel for if (p->m * p->n > 65536)
    for (int64_t j = 0; j < p->n; j++)
        for (int64_t i = 0; i < p->m; i++) {
            float *x = &c[j * ldc + i];
            switch (e->kind) {
            case TL_GEMM_EPILOGUE_BIAS:
                *x += load(dtype, e->bias, i);
                break;
            case TL_GEMM_EPILOGUE_GELU_AUX: {
                const float v = *x + (e->bias ? load(dtype, e->bias, i) : 0.0f);
                store(dtype, e->aux, j * e->ld_aux + i, v);
                *x = tl_pointwise_gelu_tanh_f(v, 0, 0, 0);
                break;
            }
            case TL_GEMM_EPILOGUE_DGELU:
                *x *= tl_gelu_tanh_derivative_f(load(dtype, e->aux, j * e->ld_aux + i));
                break;
            case TL_GEMM_EPILOGUE_BGRADB:
                break;
            }
        }
}

void tl_cpu_gemm_epilogue_f64(const GemmParams *p, double *c) {
    const GemmEpilogue *e = p->epilogue;
    const double *bias = e->bias;
    double *aux = e->aux;
    if (e->kind == TL_GEMM_EPILOGUE_BGRADB) return;
#pragma omp parallel for if (p->m * p->n > 65536)
    for (int64_t j = 0; j < p->n; j++)
        for (int64_t i = 0; i < p->m; i++) {
            double *x = &c[j * p->ldc + i];
            switch (e->kind) {
            case TL_GEMM_EPILOGUE_BIAS:
                *x += bias[i];
                break;
            case TL_GEMM_EPILOGUE_GELU_AUX: {
                const double v = *x + (bias ? bias[i] : 0.0);
                aux[j * e->ld_aux + i] = v;
                *x = tl_pointwise_gelu_tanh_d(v, 0, 0, 0);
                break;
            }
            case TL_GEMM_EPILOGUE_DGELU:
                *x *= tl_gelu_tanh_derivative_d(aux[j * e->ld_aux + i]);
                break;
            case TL_GEMM_EPILOGUE_BGRADB:
                break;
            }
        }
}

/* bias_grad[j] = sum over k of op(B)[k, j]: B is k x n column-major (n x k when transposed),
   summed in double for float64 inputs, float otherwise, stored in the output dtype. */
void tl_cpu_gemm_bias_grad(const GemmParams *p, const void *b) {
    const GemmEpilogue *e = p->epilogue;
    if (!e || e->kind != TL_GEMM_EPILOGUE_BGRADB) return;
    const int64_t step_k = p->trans_b ? p->ldb : 1, step_n = p->trans_b ? 1 : p->ldb;
#pragma omp parallel for if (p->n * p->k > 65536)
    for (int64_t j = 0; j < p->n; j++) {
        if (p->input_dtype == TL_F64) {
            double sum = 0.0;
            for (int64_t r = 0; r < p->k; r++) sum += ((const double *)b)[r * step_k + j * step_n];
            ((double *)e->bias_grad)[j] = sum;
            continue;
        }
        float sum = 0.0f;
        for (int64_t r = 0; r < p->k; r++) sum += load(p->input_dtype, b, r * step_k + j * step_n);
        store(p->output_dtype, e->bias_grad, j, sum);
    }
}
