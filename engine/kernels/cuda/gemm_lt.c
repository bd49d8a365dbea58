/* A GEMM with an epilogue through cublasLtMatmul (bias, GELU with its input kept as aux, GELU's
   derivative from aux, the bias gradient from B): the product and its post-processing in one
   kernel, on the device's stream. */
#include <stdint.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/gemm_epilogue.h"

#define OP_NAME "gemm"

static bool aligned_16(const void *ptr) {
    return (uintptr_t)ptr % 16 == 0;
}

bool tl_cuda_gemm_lt_eligible(const GemmParams *p, const void *a, const void *b, const void *c) {
    const GemmEpilogue *e = p->epilogue;
    if (!e || p->batch_count > 1 || p->m == 0 || p->n == 0 || p->k == 0) return false;
    if (p->input_dtype != TL_BF16 && p->input_dtype != TL_F16 && p->input_dtype != TL_F32)
        return false;
    const size_t in = tl_dtype_size(p->input_dtype), out = tl_dtype_size(p->output_dtype);
    if (!aligned_16(a) || !aligned_16(b) || !aligned_16(c) || (size_t)p->lda * in % 16 ||
        (size_t)p->ldb * in % 16 || (size_t)p->ldc * out % 16)
        return false;
    if (!aligned_16(e->bias) || !aligned_16(e->bias_grad)) return false;
    if ((e->kind == TL_GEMM_EPILOGUE_GELU_AUX || e->kind == TL_GEMM_EPILOGUE_DGELU) &&
        (!aligned_16(e->aux) || e->ld_aux % 8 || (size_t)e->ld_aux * out % 16))
        return false;
    return true;
}

static cublasLtEpilogue_t lt_epilogue(const GemmEpilogue *e) {
    switch (e->kind) {
    case TL_GEMM_EPILOGUE_BIAS:
        return CUBLASLT_EPILOGUE_BIAS;
    case TL_GEMM_EPILOGUE_GELU_AUX:
        return e->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case TL_GEMM_EPILOGUE_DGELU:
        return CUBLASLT_EPILOGUE_DGELU;
    case TL_GEMM_EPILOGUE_BGRADB:
        return CUBLASLT_EPILOGUE_BGRADB;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

/* The descriptors of one call, destroyed together */
typedef struct lt_call {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout[3]; /* A, B, C (= D) */
    cublasLtMatmulPreference_t preference;
} lt_call;

static void lt_call_destroy(lt_call *call) {
    if (call->preference) cublasLtMatmulPreferenceDestroy(call->preference);
    for (int i = 0; i < 3; i++)
        if (call->layout[i]) cublasLtMatrixLayoutDestroy(call->layout[i]);
    if (call->desc) cublasLtMatmulDescDestroy(call->desc);
}

static cublasStatus_t set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                               const void *value, size_t size) {
    return cublasLtMatmulDescSetAttribute(desc, attr, value, size);
}

/* The matmul description of p: transposes, epilogue and its vectors */
static cublasStatus_t describe(const GemmParams *p, cublasComputeType_t compute, lt_call *call) {
    const GemmEpilogue *e = p->epilogue;
    cublasStatus_t s = cublasLtMatmulDescCreate(&call->desc, compute, CUDA_R_32F);
    const int32_t trans_a = tl_cuda_blas_op(p->trans_a), trans_b = tl_cuda_blas_op(p->trans_b);
    const uint32_t epilogue = lt_epilogue(e);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    const void *vector = e->kind == TL_GEMM_EPILOGUE_BGRADB ? e->bias_grad : e->bias;
    if (s == CUBLAS_STATUS_SUCCESS && vector)
        s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof vector);
    if (s == CUBLAS_STATUS_SUCCESS &&
        (e->kind == TL_GEMM_EPILOGUE_GELU_AUX || e->kind == TL_GEMM_EPILOGUE_DGELU)) {
        s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux, sizeof e->aux);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = set_desc(call->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e->ld_aux,
                         sizeof e->ld_aux);
    }
    /* A is m x k (k x m stored when transposed), B k x n (n x k), C m x n */
    const cudaDataType_t in = tl_cuda_data_type(p->input_dtype),
                         out = tl_cuda_data_type(p->output_dtype);
    const uint64_t rows[3] = {(uint64_t)(p->trans_a ? p->k : p->m),
                              (uint64_t)(p->trans_b ? p->n : p->k), (uint64_t)p->m};
    const uint64_t cols[3] = {(uint64_t)(p->trans_a ? p->m : p->k),
                              (uint64_t)(p->trans_b ? p->k : p->n), (uint64_t)p->n};
    const int64_t ld[3] = {p->lda, p->ldb, p->ldc};
    for (int i = 0; i < 3 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatrixLayoutCreate(&call->layout[i], i < 2 ? in : out, rows[i], cols[i], ld[i]);
    return s;
}

/* cuBLASLt's workspace: what its heuristic asks for, at most this */
#define LT_WORKSPACE_LIMIT ((size_t)32 << 20)

tl_status tl_cuda_gemm_lt(tl_device device, const GemmParams *p, const void *a, const void *b,
                          void *c, bool *ran) {
    *ran = false;
    cublasLtHandle_t lt;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas_lt(device.index, OP_NAME, &lt, &stream));
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (p->input_dtype == TL_F32 && tl_cuda_matmul_allow_tf32())
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    lt_call call = {0};
    cublasStatus_t s = describe(p, compute, &call);
    const size_t limit = LT_WORKSPACE_LIMIT;
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceCreate(&call.preference);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(
            call.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit);
    if (s != CUBLAS_STATUS_SUCCESS) {
        lt_call_destroy(&call);
        return tl_cublas_fail(s, OP_NAME, "describing a cuBLASLt matmul");
    }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    s = cublasLtMatmulAlgoGetHeuristic(lt, call.desc, call.layout[0], call.layout[1],
                                       call.layout[2], call.layout[2], call.preference, 1, &result,
                                       &found);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) { /* no kernel for this problem: the caller's */
        lt_call_destroy(&call);
        return TL_OK;
    }
    void *workspace = NULL;
    tl_status status = TL_OK;
    if (result.workspaceSize > 0)
        status = tl_cuda_malloc(device.index, result.workspaceSize, OP_NAME, &workspace);
    if (status == TL_OK) {
        const float alpha = p->alpha, beta = p->beta;
        s = cublasLtMatmul(lt, call.desc, &alpha, a, call.layout[0], b, call.layout[1], &beta, c,
                           call.layout[2], c, call.layout[2], &result.algo, workspace,
                           result.workspaceSize, stream);
        status = s == CUBLAS_STATUS_SUCCESS ? tl_cuda_check_launch(OP_NAME)
                                            : tl_cublas_fail(s, OP_NAME, "cublasLtMatmul");
        *ran = status == TL_OK;
    }
    if (workspace) tl_cuda_free(device.index, workspace);
    lt_call_destroy(&call);
    return status;
}
