/* Internal: the list of every kernel table, read by the dispatcher. */
#ifndef TLUA_REGISTRY_H
#define TLUA_REGISTRY_H

#include "kernels/kernel.h"

extern const tl_kernel_table *const tl_kernel_tables[];
extern const int tl_kernel_table_count;

#endif
