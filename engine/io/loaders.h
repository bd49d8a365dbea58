/* Internal to the engine: the loaders' entries that read a file's bytes from memory instead of a
 * path (the fuzz harnesses of fuzz/native and the C tests use them); the path loaders of
 * tlua/io.h read the file and take the same code path. */
#ifndef TLUA_IO_LOADERS_H
#define TLUA_IO_LOADERS_H

#include <stddef.h>

#include "tlua/io.h"

/* tl_load_safetensors on the size bytes at bytes (a whole safetensors file);
   name stands for the path in messages ("load: 'name': ..."). */
tl_status tl_load_safetensors_buffer(const void *bytes, size_t size, const char *name,
                                     tl_named_tensor **tensors, int *count,
                                     tl_metadata_entry **metadata, int *metadata_count);

/* tl_read_idx on the size bytes at bytes (a whole IDX file, plain or gzip);
   name stands for the path in messages ("read_idx: 'name': ..."). */
tl_status tl_read_idx_buffer(const void *bytes, size_t size, const char *name, tl_tensor **out);

#endif
