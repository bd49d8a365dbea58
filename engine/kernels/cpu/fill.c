/* PLACEHOLDER: the CPU fill kernels (to be written). */
#include "kernels/cpu/cpu_kernels.h"

const tl_kernel_table tl_cpu_fill_table = {TL_DEVICE_CPU, NULL, 0};
