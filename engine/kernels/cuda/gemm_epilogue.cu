/* The CUDA GEMM's epilogues applied after a plain product (kernels/gemm.h), for what cuBLASLt
   does not run: float64, unaligned operands, an empty k. Same math as the CPU's: bias adds
   bias[i] to row i; gelu_aux keeps v = P + bias in aux and stores gelu(v); dgelu scales P by
   gelu'(aux); bgradb sums op(B)'s k rows. */
#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/pointwise.h"

#define OP_NAME          "gemm"
#define EPILOGUE_THREADS 256

__device__ static float gelu_of(float x) {
    return tl_pointwise_gelu_tanh_f(x, 0, 0, 0);
}
__device__ static double gelu_of(double x) {
    return tl_pointwise_gelu_tanh_d(x, 0, 0, 0);
}
__device__ static float gelu_slope(float x) {
    return tl_gelu_tanh_derivative_f(x);
}
__device__ static double gelu_slope(double x) {
    return tl_gelu_tanh_derivative_d(x);
}

/* Every element (i, j) of the m x n product c, one a thread over a grid-strided range */
template <class E>
__global__ void epilogue_kernel(tl_gemm_epilogue_kind kind, typename E::T *c, int64_t ldc,
                                int64_t m, int64_t n, const typename E::T *bias, typename E::T *aux,
                                int64_t ld_aux) {
    typedef typename E::C C;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < m * n;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t % m, j = t / m;
        typename E::T *x = &c[j * ldc + i];
        const C v = E::load(*x);
        if (kind == TL_GEMM_EPILOGUE_BIAS) {
            *x = E::store(v + E::load(bias[i]));
        } else if (kind == TL_GEMM_EPILOGUE_GELU_AUX) {
            const C biased = bias ? v + E::load(bias[i]) : v;
            aux[j * ld_aux + i] = E::store(biased);
            *x = E::store(gelu_of(biased));
        } else if (kind == TL_GEMM_EPILOGUE_DGELU) {
            *x = E::store(v * gelu_slope(E::load(aux[j * ld_aux + i])));
        }
    }
}

/* bias_grad[j] = sum over r < k of op(B)[r, j], at B[r step_k + j step_n]: a thread a column */
template <class In, class Out>
__global__ void bias_grad_kernel(const typename In::T *b, int64_t k, int64_t n, int64_t step_k,
                                 int64_t step_n, typename Out::T *bias_grad) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= n) return;
    typename In::C sum = 0;
    for (int64_t r = 0; r < k; r++) sum += In::load(b[r * step_k + j * step_n]);
    bias_grad[j] = Out::store((typename Out::C)sum);
}

static unsigned blocks_for(int64_t count) {
    const int64_t blocks = (count + EPILOGUE_THREADS - 1) / EPILOGUE_THREADS;
    return (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

tl_status tl_cuda_gemm_epilogue(tl_device device, const GemmParams *p, const void *b, void *c) {
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device.index, OP_NAME, &stream));
    const GemmEpilogue *e = p->epilogue;
    if (e->kind == TL_GEMM_EPILOGUE_BGRADB) {
        if (p->n == 0) return TL_OK;
        const int64_t step_k = p->trans_b ? p->ldb : 1, step_n = p->trans_b ? 1 : p->ldb;
        return tl_cuda_floating((int)p->input_dtype, OP_NAME, [&](auto in) -> tl_status {
            typedef decltype(in) In;
            return tl_cuda_floating((int)p->output_dtype, OP_NAME, [&](auto out) -> tl_status {
                typedef decltype(out) Out;
                bias_grad_kernel<In, Out><<<blocks_for(p->n), EPILOGUE_THREADS, 0, stream>>>(
                    (const typename In::T *)b, p->k, p->n, step_k, step_n,
                    (typename Out::T *)e->bias_grad);
                return tl_cuda_check_launch(OP_NAME);
            });
        });
    }
    if (p->m == 0 || p->n == 0) return TL_OK;
    return tl_cuda_floating((int)p->output_dtype, OP_NAME, [&](auto out) -> tl_status {
        typedef decltype(out) E;
        typedef typename E::T T;
        epilogue_kernel<E><<<blocks_for(p->m * p->n), EPILOGUE_THREADS, 0, stream>>>(
            e->kind, (T *)c, p->ldc, p->m, p->n, (const T *)e->bias, (T *)e->aux, e->ld_aux);
        return tl_cuda_check_launch(OP_NAME);
    });
}
