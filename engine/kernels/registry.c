/* Every kernel table and variant table of the build, from the list CMakeLists.txt generates
   (kernel_tables.h). */
#include "kernels/registry.h"

/* kernel_tables.h, generated in the build folder at configure time: one TL_TABLE(name) line per
   TL_KERNEL_TABLE(name, ...) line and one TL_VARIANTS(name) line per TL_VARIANT_TABLE(name, ...)
   line of the .c files of engine/kernels/cpu (and, with CUDA, of the .c and .cu files of
   engine/kernels/cuda). */
#define TL_TABLE(name)    extern const tl_kernel_table name;
#define TL_VARIANTS(name) extern const tl_variant_table name;
#include <kernel_tables.h>
#undef TL_TABLE
#undef TL_VARIANTS

const tl_kernel_table *const tl_kernel_tables[] = {
#define TL_TABLE(name) &name,
#define TL_VARIANTS(name)
#include <kernel_tables.h>
#undef TL_TABLE
#undef TL_VARIANTS
};
const int tl_kernel_table_count = (int)(sizeof tl_kernel_tables / sizeof tl_kernel_tables[0]);

/* a leading NULL keeps the array non-empty in a build without variants */
static const tl_variant_table *const variant_tables[] = {
    NULL,
#define TL_TABLE(name)
#define TL_VARIANTS(name) &name,
#include <kernel_tables.h>
#undef TL_TABLE
#undef TL_VARIANTS
};
const tl_variant_table *const *const tl_variant_tables = variant_tables + 1;
const int tl_variant_table_count = (int)(sizeof variant_tables / sizeof variant_tables[0]) - 1;
