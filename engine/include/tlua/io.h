/* Files: checkpoints in the safetensors format and datasets in the IDX format. */
#ifndef TLUA_IO_H
#define TLUA_IO_H

#include "tlua/error.h"
#include "tlua/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor and its name in a checkpoint. */
typedef struct tl_named_tensor {
    const char *name;
    tl_tensor *tensor;
} tl_named_tensor;

/* One string-to-string pair of a checkpoint's "__metadata__". */
typedef struct tl_metadata_entry {
    const char *key;
    const char *value;
} tl_metadata_entry;

/* ---- safetensors ----------------------------------------------------------
   File layout: an 8-byte little-endian header length N, N bytes of JSON (an
   object mapping each name to {"dtype", "shape", "data_offsets"}, plus an
   optional "__metadata__" object of strings, padded with spaces to a multiple
   of 8 bytes), then the tensors' bytes, little-endian, row-major, contiguous.

   dtypes: float32 "F32", float64 "F64", bfloat16 "BF16", float16 "F16",
   int32 "I32", int64 "I64", bool "BOOL" (one byte, 0 or 1) both ways. Loading
   also widens "U8", "I8", "U16", "I16" to int32 and "U32" to int64; any other
   dtype ("U64", "F8_E4M3", ...) is an error naming the tensor and the dtype.

   Order: the header lists tensors sorted by name (strcmp), metadata sorted by
   key; the data is laid out by descending element size, then name, so each
   tensor starts at a multiple of its element size. Loading returns tensors
   sorted by name and metadata sorted by key, whatever the file's order. */

/* Writes `count` tensors (any device, any strides) and `metadata_count`
   metadata pairs (metadata may be NULL when metadata_count is 0) to path.
   Names and keys must be non-NULL, unique, valid UTF-8, and no tensor may be
   called "__metadata__". The file is written under a temporary name in the
   same directory (path + ".tmp.<pid>.<n>"), flushed to disk, then renamed
   over path: on failure path is untouched and no temporary file remains. */
tl_status tl_save_safetensors(const char *path, const tl_named_tensor *tensors, int count,
                              const tl_metadata_entry *metadata, int metadata_count);

/* Reads a whole file into new contiguous CPU tensors. path must name a
   regular file (a FIFO, directory or device is refused before it is opened).
   The header is checked completely, by the reference implementation's rules,
   before anything is allocated: N at most 100,000,000 and 8 + N within the
   file; UTF-8 JSON starting with '{' (trailing spaces allowed); known dtypes;
   shapes of integers >= 0 whose sizes fit (engine/size.h); shape * dtype size
   equal to the offsets' span; no duplicate names; and the tensors, sorted by
   offset, tile the data exactly: no hole, no overlap, no trailing byte. BOOL
   bytes load as 0 or 1 (any non-zero byte is true). On success *tensors is an array of
   *count entries whose names and tensors the caller owns; metadata and
   metadata_count may be NULL to ignore the metadata. Free everything with
   tl_safetensors_free. On failure the outputs are left as they were and
   nothing needs freeing. */
tl_status tl_load_safetensors(const char *path, tl_named_tensor **tensors, int *count,
                              tl_metadata_entry **metadata, int *metadata_count);

/* Frees what tl_load_safetensors returned: the names, one reference to each
   tensor (tl_retain a tensor first to keep it), the strings and both arrays.
   NULL arrays are fine. */
void tl_safetensors_free(tl_named_tensor *tensors, int count, tl_metadata_entry *metadata,
                         int metadata_count);

/* ---- IDX (the MNIST format) -----------------------------------------------
   Magic: two zero bytes, a type byte, the number of dims (1 to TL_MAX_DIMS);
   then each dim as a big-endian uint32; then the elements, big-endian,
   row-major. Types: 0x08 unsigned byte, 0x09 signed byte, 0x0B int16 and
   0x0C int32 give an int32 tensor (images and labels alike: convert with
   tl_to, and scale, as needed); 0x0D float32 gives float32; 0x0E float64
   gives float64. Files compressed with gzip (MNIST's .gz) are read as they
   are; plain files too. The data must fill the file exactly. path must name a
   regular file (refused before it is opened otherwise); dims are checked by
   engine/size.h. */
tl_status tl_read_idx(const char *path, tl_tensor **out);

#ifdef __cplusplus
}
#endif

#endif
