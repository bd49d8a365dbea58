/* PLACEHOLDER: the CPU softmax kernels (to be written). */
#include "kernels/cpu/cpu_kernels.h"

const tl_kernel_table tl_cpu_softmax_table = {TL_DEVICE_CPU, NULL, 0};
