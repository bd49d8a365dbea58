/* Internal: the list of every kernel table, read by the dispatcher. */
#ifndef TLUA_REGISTRY_H
#define TLUA_REGISTRY_H

#include "kernels/kernel.h"

extern const tl_kernel_table *const tl_kernel_tables[];
extern const int tl_kernel_table_count;
extern const tl_variant_table *const *const tl_variant_tables;
extern const int tl_variant_table_count;

/* The first problem of the kernel tables (an entry whose signature is not its op family's, a
   second kernel for one (op, device, dtype), an empty dtype set), or NULL. While there is one,
   every tl_dispatch fails with it. */
const char *tl_registry_problem(void);
/* Test hook: rebuilds the registry from the given tables (NULL: the build's own, with its
   variants; given tables come without variants) and makes it current. Not thread-safe; run
   counts start over. */
void tl_registry_use_tables(const tl_kernel_table *const *tables, int count);

#endif
