/* Internal to engine/io: the safetensors format as the writer and the loader share it (dtypes,
 * limits, UTF-8) and the header the loader has parsed and validated. */
#ifndef TLUA_SAFETENSORS_FORMAT_H
#define TLUA_SAFETENSORS_FORMAT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/io.h"

#define ST_MAX_HEADER 100000000ull /* bytes of JSON accepted (the reference's limit) */

/* How the bytes of a file dtype become a tlua dtype. */
typedef enum st_conv { ST_SAME, ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_U32 } st_conv;

typedef struct st_dtype {
    const char *name;
    tl_dtype dtype;
    size_t size; /* bytes per element in the file */
    st_conv conv;
} st_dtype;

/* What the loader accepts, for messages. */
#define ST_SUPPORTED                                                                               \
    "F32, F64, BF16, F16, I32, I64, BOOL; U8, I8, U16, I16 load as int32, U32 as int64"

/* The file dtype called name ("F32"), or NULL. */
const st_dtype *st_dtype_by_name(const char *name);

/* The file dtype save writes for a tlua dtype, or NULL when it has none. */
const st_dtype *st_dtype_for(tl_dtype dtype);

/* Strict UTF-8 of n bytes (no overlong forms, no surrogates, nothing above
   U+10FFFF); *bad is the offset of the first bad byte when it is not. */
bool st_is_utf8(const char *s, size_t n, size_t *bad);

bool st_host_is_little_endian(void);

/* Reverses the bytes of each of count elements of width bytes. */
void st_swap_bytes(void *data, size_t count, size_t width);

/* One tensor of a validated header: its data lies at [begin, end) of the data
   buffer, and end - begin is numel * dtype->size. */
typedef struct st_entry {
    const char *name; /* points into the parsed JSON */
    const st_dtype *dtype;
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;
} st_entry;

/* A validated header: entries sorted by name, metadata items (strings) sorted
   by key. Free with st_header_free. */
typedef struct st_header {
    cJSON *root;
    st_entry *entries;
    int count;
    const cJSON **meta;
    int metadata_count;
} st_header;

/* Parses and validates the JSON of a header of length bytes (after the 8-byte
   length) for a data buffer of data_size bytes, as the reference
   implementation does: UTF-8 JSON object starting with '{' (spaces may pad it),
   "__metadata__" optional and a map of strings, every entry a known dtype, a
   shape of non-negative integers and data_offsets [begin, end] with
   begin <= end and end - begin == numel * dtype size (overflow-checked),
   unique names, and the tensors, sorted by offsets, tiling the data buffer
   exactly: no hole, no overlap, nothing after the last. Errors read
   "load: 'name': ...". On failure nothing needs freeing. */
tl_status st_header_parse(const char *name, const char *text, size_t length, uint64_t data_size,
                          st_header *header);

void st_header_free(st_header *header);

#endif
