/* libFuzzer harness: any bytes as a safetensors file, loaded from memory. A failure must be a
   message naming the file; a success must agree with an independent reading of the file (header
   by cJSON, data by hand): names, dtypes, shapes, sizes that tile the data, values, 0/1 bools. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/loaders.h"
#include "tlua/tlua.h"

#define NAME "fuzz.safetensors"

__attribute__((noreturn)) static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_safetensors: invariant broken: %s (%s)\n", what, detail ? detail : "");
    abort();
}

/* The harness's own view of a file dtype: tlua dtype, bytes per element. */
typedef struct file_dtype {
    const char *name;
    tl_dtype dtype;
    size_t size;
} file_dtype;

static const file_dtype file_dtypes[] = {
    {"F32", TL_F32, 4}, {"F64", TL_F64, 8}, {"BF16", TL_BF16, 2}, {"F16", TL_F16, 2},
    {"I32", TL_I32, 4}, {"I64", TL_I64, 8}, {"BOOL", TL_BOOL, 1}, {"U8", TL_I32, 1},
    {"I8", TL_I32, 1},  {"U16", TL_I32, 2}, {"I16", TL_I32, 2},   {"U32", TL_I64, 4},
};

static const file_dtype *find_dtype(const char *name) {
    for (size_t i = 0; i < sizeof file_dtypes / sizeof file_dtypes[0]; i++)
        if (strcmp(file_dtypes[i].name, name) == 0) return &file_dtypes[i];
    return NULL;
}

static uint64_t le(const uint8_t *p, size_t width) {
    uint64_t v = 0;
    for (size_t b = width; b-- > 0;) v = v << 8 | p[b];
    return v;
}

/* The value element i of a tensor loaded from fd's bytes must have, as int64 (integers). */
static int64_t file_integer(const file_dtype *fd, const uint8_t *p) {
    uint64_t u = le(p, fd->size);
    if (strcmp(fd->name, "I8") == 0) return (int8_t)u;
    if (strcmp(fd->name, "I16") == 0) return (int16_t)u;
    if (strcmp(fd->name, "I32") == 0) return (int32_t)u;
    if (strcmp(fd->name, "I64") == 0) return (int64_t)u;
    return (int64_t)u; /* U8, U16, U32 */
}

static int64_t tensor_integer(const tl_tensor *t, int64_t i) {
    if (t->dtype == TL_I32) return ((const int32_t *)tl_data(t))[i];
    return ((const int64_t *)tl_data(t))[i];
}

/* One loaded tensor against its header entry and its bytes in the data. */
static void check_tensor(const tl_named_tensor *named, const cJSON *entry, const uint8_t *data,
                         uint64_t data_size, uint64_t *span) {
    const tl_tensor *t = named->tensor;
    if (!cJSON_IsObject(entry)) broken("a loaded tensor has no header entry", named->name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offsets) ||
        cJSON_GetArraySize(offsets) != 2)
        broken("a loaded tensor's entry is malformed", named->name);
    const file_dtype *fd = find_dtype(dtype->valuestring);
    if (!fd) broken("a tensor of an unknown dtype loaded", dtype->valuestring);
    if (t->dtype != fd->dtype) broken("loaded dtype differs from the header's", named->name);
    if (t->ndim != cJSON_GetArraySize(shape)) broken("ndim differs", named->name);
    __int128 numel = 1;
    int d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)t->shape[d])
            broken("a dim differs from the header's", named->name);
        numel *= t->shape[d];
    }
    if (numel != tl_numel(t)) broken("numel differs from the shape's product", named->name);
    if (!tl_is_contiguous(t)) broken("a loaded tensor is not contiguous", named->name);
    double begin_d = offsets->child->valuedouble, end_d = offsets->child->next->valuedouble;
    if (!(begin_d >= 0 && end_d >= begin_d && end_d <= (double)data_size))
        broken("loaded offsets out of the data", named->name);
    uint64_t begin = (uint64_t)begin_d, end = (uint64_t)end_d;
    if ((__int128)(end - begin) != numel * (__int128)fd->size)
        broken("the header's byte size differs from numel * dtype size", named->name);
    *span += end - begin;
    const uint8_t *src = data + begin;
    for (int64_t i = 0; i < (int64_t)numel; i++) {
        const uint8_t *p = src + (size_t)i * fd->size;
        if (fd->dtype == TL_BOOL) {
            uint8_t b = ((const uint8_t *)tl_data(t))[i];
            if (b != (p[0] != 0)) broken("a bool byte is not (file byte != 0)", named->name);
        } else if (fd->dtype == TL_I32 || fd->dtype == TL_I64) {
            if (tensor_integer(t, i) != file_integer(fd, p))
                broken("an integer differs from the file's", named->name);
        } else if (memcmp((const uint8_t *)tl_data(t) + (size_t)i * fd->size, p, fd->size) != 0) {
            broken("float bytes differ from the file's", named->name);
        }
    }
}

static void check_success(const uint8_t *bytes, size_t size, const tl_named_tensor *tensors,
                          int count, const tl_metadata_entry *metadata, int metadata_count) {
    if (size < 8) broken("a file under 8 bytes loaded", NULL);
    uint64_t length = le(bytes, 8);
    if (length > 100000000 || length > size - 8) broken("a bad header length loaded", NULL);
    if (length == 0 || bytes[8] != '{') broken("a header not starting with '{' loaded", NULL);
    cJSON *root = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)length);
    if (!cJSON_IsObject(root)) broken("a header cJSON cannot parse loaded", NULL);
    const uint8_t *data = bytes + 8 + length;
    uint64_t data_size = size - 8 - length, span = 0;
    int entries = 0;
    for (const cJSON *item = root->child; item; item = item->next)
        entries += strcmp(item->string, "__metadata__") != 0;
    if (entries != count) broken("tensor count differs from the header's", NULL);
    for (int i = 0; i < count; i++) {
        if (i && strcmp(tensors[i - 1].name, tensors[i].name) >= 0)
            broken("names not sorted and unique", tensors[i].name);
        check_tensor(&tensors[i], cJSON_GetObjectItemCaseSensitive(root, tensors[i].name), data,
                     data_size, &span);
    }
    if (span != data_size) broken("the tensors do not cover the data exactly", NULL);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    if ((meta ? cJSON_GetArraySize(meta) : 0) != metadata_count)
        broken("metadata count differs", NULL);
    for (int i = 0; i < metadata_count; i++) {
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(meta, metadata[i].key);
        if (!cJSON_IsString(value) || strcmp(value->valuestring, metadata[i].value) != 0)
            broken("a metadata value differs", metadata[i].key);
    }
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t size) {
    tl_named_tensor *tensors = NULL;
    tl_metadata_entry *metadata = NULL;
    int count = -1, metadata_count = -1;
    if (tl_load_safetensors_buffer(bytes, size, NAME, &tensors, &count, &metadata,
                                   &metadata_count) != TL_OK) {
        const char *message = tl_last_error();
        if (strncmp(message, "load: '" NAME "': ", strlen("load: '" NAME "': ")) != 0 &&
            strncmp(message, "load: out of memory", 19) != 0)
            broken("an error message that does not name the file", message);
        if (tensors || metadata || count != -1 || metadata_count != -1)
            broken("a failed load changed its outputs", message);
        return 0;
    }
    check_success(bytes, size, tensors, count, metadata, metadata_count);
    tl_safetensors_free(tensors, count, metadata, metadata_count);
    return 0;
}
