/* CUDA layer norm forward and backward, the C side: the dtypes of cpu/layer_norm.c
   (cuda/layer_norm.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status forward(tl_tensor *out, tl_tensor *mean, tl_tensor *rstd, const tl_tensor *in,
                         const tl_tensor *weight, const tl_tensor *bias, double eps) {
    const int64_t D = in->shape[in->ndim - 1];
    tl_cuda_layer_norm l = {
        .dtype = (int)in->dtype,
        .rows = D > 0 ? tl_numel(in) / D : 0,
        .D = D,
        .eps = eps,
        .in = tl_data(in),
        .weight = weight ? tl_data(weight) : NULL,
        .bias = bias ? tl_data(bias) : NULL,
        .out = tl_data(out),
        .mean = tl_data(mean),
        .rstd = tl_data(rstd),
    };
    if (l.rows == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, "layer_norm", &l.at));
    return tl_cuda_layer_norm_run(&l);
}

/* layer_norm_backward_input: first = grad_in; layer_norm_backward_weight: first = grad_weight,
   second = grad_bias (either NULL). */
static tl_status backward(const char *op, bool input, tl_tensor *first, tl_tensor *second,
                          const tl_tensor *grad_out, const tl_tensor *in, const tl_tensor *mean,
                          const tl_tensor *rstd, const tl_tensor *weight) {
    const int64_t D = grad_out->shape[grad_out->ndim - 1];
    tl_cuda_layer_norm l = {
        .dtype = (int)grad_out->dtype,
        .rows = D > 0 ? tl_numel(grad_out) / D : 0,
        .D = D,
        .grad_out = tl_data(grad_out),
        .in = in ? tl_data(in) : NULL,
        .mean = mean ? tl_data(mean) : NULL,
        .rstd = rstd ? tl_data(rstd) : NULL,
        .weight = weight ? tl_data(weight) : NULL,
    };
    if (input)
        l.out = tl_data(first);
    else {
        l.grad_weight = first ? tl_data(first) : NULL;
        l.grad_bias = second ? tl_data(second) : NULL;
        if (!first && !second) return TL_OK;
    }
    if (D == 0 || (input && l.rows == 0)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, op, &l.at));
    return input ? tl_cuda_layer_norm_backward_input_run(&l)
                 : tl_cuda_layer_norm_backward_weight_run(&l);
}

static tl_status backward_input(tl_tensor *first, tl_tensor *second, const tl_tensor *grad_out,
                                const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,
                                const tl_tensor *weight) {
    return backward("layer_norm_backward_input", true, first, second, grad_out, in, mean, rstd,
                    weight);
}

static tl_status backward_weight(tl_tensor *first, tl_tensor *second, const tl_tensor *grad_out,
                                 const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,
                                 const tl_tensor *weight) {
    return backward("layer_norm_backward_weight", false, first, second, grad_out, in, mean, rstd,
                    weight);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(layer_norm, TL_DTYPES_FLOATING, layer_norm, forward),
    TL_KERNEL(layer_norm_backward_input, TL_DTYPES_FLOATING, layer_norm_backward, backward_input),
    TL_KERNEL(layer_norm_backward_weight, TL_DTYPES_FLOATING, layer_norm_backward, backward_weight),
};

TL_KERNEL_TABLE(tl_cuda_layer_norm_table, TL_DEVICE_CUDA, entries);
