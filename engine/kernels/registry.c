/* Every kernel table of the build, from the list CMakeLists.txt generates (kernel_tables.h). */
#include "kernels/registry.h"

/* kernel_tables.h, generated in the build folder at configure time: one TL_TABLE(name) line per
   TL_KERNEL_TABLE(name, ...) line of the .c files of engine/kernels/cpu (and, with CUDA, of
   the .c and .cu files of engine/kernels/cuda). */
#define TL_TABLE(name) extern const tl_kernel_table name;
#include <kernel_tables.h>
#undef TL_TABLE

const tl_kernel_table *const tl_kernel_tables[] = {
#define TL_TABLE(name) &name,
#include <kernel_tables.h>
#undef TL_TABLE
};
const int tl_kernel_table_count = (int)(sizeof tl_kernel_tables / sizeof tl_kernel_tables[0]);
