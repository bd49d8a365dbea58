/* CUDA softmax and log_softmax backward along one dim, the C side: the dtypes of
   cpu/softmax_backward.c, the geometry for cuda/softmax_backward.cu. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/softmax_backward.h"

static tl_status run(const char *op, bool log_mode, tl_tensor *grad_input, const tl_tensor *grad,
                     const tl_tensor *output, int dim) {
    tl_cuda_softmax_backward s = {
        .dtype = (int)output->dtype,
        .log_mode = log_mode,
        .grad_input = tl_data(grad_input),
        .grad = tl_data(grad),
        .output = tl_data(output),
        .len = output->shape[dim],
        .step = {grad_input->strides[dim], grad->strides[dim], output->strides[dim]},
    };
    const int64_t *strides[TL_CUDA_SMB_TENSORS] = {grad_input->strides, grad->strides,
                                                   output->strides};
    tl_cuda_positions_make(&s.pos, output->ndim, output->shape, dim, TL_CUDA_SMB_TENSORS, strides);
    if (s.pos.count == 0 || s.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(output, op, &s.at));
    return tl_cuda_softmax_backward_run(&s);
}

static tl_status softmax_backward_kernel(tl_tensor *grad_input, const tl_tensor *grad,
                                         const tl_tensor *output, int dim) {
    return run("softmax_backward", false, grad_input, grad, output, dim);
}

static tl_status log_softmax_backward_kernel(tl_tensor *grad_input, const tl_tensor *grad,
                                             const tl_tensor *output, int dim) {
    return run("log_softmax_backward", true, grad_input, grad, output, dim);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(softmax_backward, TL_DTYPES_FLOATING, softmax_backward, softmax_backward_kernel),
    TL_KERNEL(log_softmax_backward, TL_DTYPES_FLOATING, softmax_backward,
              log_softmax_backward_kernel),
};

TL_KERNEL_TABLE(tl_cuda_softmax_backward_table, TL_DEVICE_CUDA, entries);
