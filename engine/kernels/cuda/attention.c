/* CUDA scaled dot-product attention forward and backward, the C side: the operands unpacked
   for the device side (cuda/attention.cu) and the table. */
#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/cuda_kernels.h"

/* The geometry of q [B, H, T, D] and k [B, H, S, D] and the scalars. */
static tl_cuda_attention describe(const tl_tensor *q, const tl_tensor *k,
                                  const tl_attention_args *args) {
    return (tl_cuda_attention){
        .dtype = (int)q->dtype,
        .B = q->shape[0],
        .H = q->shape[1],
        .T = q->shape[2],
        .S = k->shape[2],
        .D = q->shape[3],
        .scale = args->scale,
        .dropout = args->dropout,
        .causal = args->causal,
        .seed = args->seed,
        .counter = args->counter,
    };
}

static void operand(tl_cuda_attention *a, int which, const tl_tensor *t) {
    if (!t) return;
    a->data[which] = tl_data(t);
    for (int d = 0; d < 3; d++) a->stride[which][d] = t->strides[d];
}

static tl_status forward(tl_tensor *out, tl_tensor *lse, const tl_tensor *q, const tl_tensor *k,
                         const tl_tensor *v, const tl_attention_args *args) {
    tl_cuda_attention a = describe(q, k, args);
    operand(&a, TL_CUDA_ATT_Q, q);
    operand(&a, TL_CUDA_ATT_K, k);
    operand(&a, TL_CUDA_ATT_V, v);
    operand(&a, TL_CUDA_ATT_OUT, out);
    a.lse = tl_data(lse);
    if (a.B == 0 || a.H == 0 || a.T == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(out, "scaled_dot_product_attention", &a.at));
    return tl_cuda_attention_run(&a);
}

static tl_status backward(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v, tl_tensor *delta,
                          const tl_tensor *grad_out, const tl_tensor *q, const tl_tensor *k,
                          const tl_tensor *v, const tl_tensor *out, const tl_tensor *lse,
                          const tl_attention_args *args) {
    tl_cuda_attention a = describe(q, k, args);
    operand(&a, TL_CUDA_ATT_Q, q);
    operand(&a, TL_CUDA_ATT_K, k);
    operand(&a, TL_CUDA_ATT_V, v);
    operand(&a, TL_CUDA_ATT_OUT, out);
    operand(&a, TL_CUDA_ATT_GRAD_OUT, grad_out);
    operand(&a, TL_CUDA_ATT_GRAD_Q, grad_q);
    operand(&a, TL_CUDA_ATT_GRAD_K, grad_k);
    operand(&a, TL_CUDA_ATT_GRAD_V, grad_v);
    a.lse = tl_data(lse);
    a.delta = tl_data(delta);
    if (a.B == 0 || a.H == 0 || (!grad_q && !grad_k && !grad_v)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, "scaled_dot_product_attention_backward", &a.at));
    return tl_cuda_attention_backward_run(&a);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(scaled_dot_product_attention, TL_DTYPES_FLOATING, attention, forward),
    TL_KERNEL(scaled_dot_product_attention_backward, TL_DTYPES_FLOATING, attention_backward,
              backward),
};

TL_KERNEL_TABLE(tl_cuda_attention_table, TL_DEVICE_CUDA, entries);
