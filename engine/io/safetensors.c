/* Checkpoints in the safetensors format: an atomic writer and a loader that checks before it
 * allocates. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlua/io.h"

#define ST_MAX_HEADER    100000000ull       /* bytes of JSON accepted (the reference's limit) */
#define ST_MAX_JSON_INT  9007199254740992.0 /* 2^53: beyond it a JSON number is inexact */
#define ST_IO_CHUNK      ((size_t)1 << 30)  /* bytes per read()/write() call */
#define ST_CONVERT_CHUNK ((size_t)1 << 20)  /* bytes per conversion pass when widening */

/* How the bytes of a file dtype become a tlua dtype. */
typedef enum st_conv { ST_SAME, ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_U32 } st_conv;

typedef struct st_dtype {
    const char *name;
    tl_dtype dtype;
    size_t size; /* bytes per element in the file */
    st_conv conv;
} st_dtype;

/* The first entry for each tlua dtype is the one save writes. */
static const st_dtype st_dtypes[] = {
    {"F32", TL_F32, 4, ST_SAME},   {"F64", TL_F64, 8, ST_SAME}, {"BF16", TL_BF16, 2, ST_SAME},
    {"F16", TL_F16, 2, ST_SAME},   {"I32", TL_I32, 4, ST_SAME}, {"I64", TL_I64, 8, ST_SAME},
    {"BOOL", TL_BOOL, 1, ST_BOOL}, {"U8", TL_I32, 1, ST_U8},    {"I8", TL_I32, 1, ST_I8},
    {"U16", TL_I32, 2, ST_U16},    {"I16", TL_I32, 2, ST_I16},  {"U32", TL_I64, 4, ST_U32},
};
#define ST_SUPPORTED                                                                               \
    "F32, F64, BF16, F16, I32, I64, BOOL; U8, I8, U16, I16 load as int32, U32 as int64"

static const st_dtype *st_dtype_by_name(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

static const st_dtype *st_dtype_for(tl_dtype dtype) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype && st_dtypes[i].size == tl_dtype_size(dtype))
            return &st_dtypes[i];
    return NULL;
}

/* "op: 'path': <message>" */
__attribute__((format(printf, 4, 5))) static tl_status
file_error(tl_status status, const char *op, const char *path, const char *fmt, ...) {
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return tl_error(status, "%s: '%s': %s", op, path, message);
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static void swap_bytes(void *data, size_t count, size_t width) {
    unsigned char *p = data;
    for (size_t i = 0; i < count; i++, p += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            unsigned char tmp = p[a];
            p[a] = p[b];
            p[b] = tmp;
        }
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool is_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        int extra;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            extra = 1, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (int i = 1; i <= extra; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += extra + 1;
    }
    return true;
}

/* ---- low-level I/O --------------------------------------------------------- */

/* Reads exactly n bytes at offset: 0, an errno value, or -1 at an early end of file. */
static int read_at(int fd, void *buf, size_t n, uint64_t offset) {
    unsigned char *p = buf;
    while (n > 0) {
        size_t want = n < ST_IO_CHUNK ? n : ST_IO_CHUNK;
        ssize_t got = pread(fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (got == 0) return -1;
        p += got, n -= (size_t)got, offset += (uint64_t)got;
    }
    return 0;
}

/* Writes exactly n bytes: 0 or an errno value. */
static int write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t want = n < ST_IO_CHUNK ? n : ST_IO_CHUNK;
        ssize_t put = write(fd, p, want);
        if (put < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (put == 0) return EIO;
        p += put, n -= (size_t)put;
    }
    return 0;
}

static const char *read_error_text(int err) {
    return err < 0 ? "the file ended early (was it changed while being read?)" : strerror(err);
}

/* ---- save ------------------------------------------------------------------ */

typedef struct st_item {
    const char *name;
    const tl_tensor *tensor;
    const st_dtype *dtype;
    uint64_t nbytes, begin;
} st_item;

static int compare_item_names(const void *a, const void *b) {
    return strcmp(((const st_item *)a)->name, ((const st_item *)b)->name);
}

/* Data order: wider elements first, then by name, so every tensor is aligned. */
static int compare_item_layout(const void *a, const void *b) {
    const st_item *x = *(const st_item *const *)a, *y = *(const st_item *const *)b;
    if (x->dtype->size != y->dtype->size) return x->dtype->size > y->dtype->size ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int compare_metadata_keys(const void *a, const void *b) {
    return strcmp((*(const tl_metadata_entry *const *)a)->key,
                  (*(const tl_metadata_entry *const *)b)->key);
}

static tl_status check_save_arguments(const char *path, const tl_named_tensor *tensors, int count,
                                      const tl_metadata_entry *metadata, int metadata_count) {
    if (!path || !*path) return tl_error(TL_ERR_ARGUMENT, "save: expected a file path, got none");
    if (count < 0 || (count > 0 && !tensors))
        return file_error(TL_ERR_ARGUMENT, "save", path, "expected %d tensors, got none", count);
    if (metadata_count < 0 || (metadata_count > 0 && !metadata))
        return file_error(TL_ERR_ARGUMENT, "save", path, "expected %d metadata entries, got none",
                          metadata_count);
    for (int i = 0; i < count; i++) {
        const char *name = tensors[i].name;
        if (!name) return file_error(TL_ERR_ARGUMENT, "save", path, "tensor %d has no name", i + 1);
        if (!tensors[i].tensor)
            return file_error(TL_ERR_ARGUMENT, "save", path, "tensor '%s' is NULL", name);
        if (!is_utf8(name))
            return file_error(TL_ERR_ARGUMENT, "save", path, "tensor name '%s' is not valid UTF-8",
                              name);
        if (strcmp(name, "__metadata__") == 0)
            return file_error(TL_ERR_ARGUMENT, "save", path,
                              "'__metadata__' is reserved and cannot name a tensor");
        if (!st_dtype_for(tensors[i].tensor->dtype))
            return file_error(TL_ERR_DTYPE, "save", path,
                              "tensor '%s' has dtype %s, which has no "
                              "safetensors name",
                              name, tl_dtype_name(tensors[i].tensor->dtype));
    }
    for (int i = 0; i < metadata_count; i++) {
        const char *key = metadata[i].key, *value = metadata[i].value;
        if (!key)
            return file_error(TL_ERR_ARGUMENT, "save", path, "metadata entry %d has no key", i + 1);
        if (!value)
            return file_error(TL_ERR_ARGUMENT, "save", path, "metadata '%s' has no value", key);
        if (!is_utf8(key) || !is_utf8(value))
            return file_error(TL_ERR_ARGUMENT, "save", path,
                              "metadata '%s' is not valid UTF-8 (key or value)", key);
    }
    return TL_OK;
}

/* Adds raw JSON text ("[2,3]") under key; false when out of memory. */
static bool add_raw(cJSON *object, const char *key, const char *text) {
    cJSON *raw = cJSON_CreateRaw(text);
    if (!raw) return false;
    if (!cJSON_AddItemToObject(object, key, raw)) {
        cJSON_Delete(raw);
        return false;
    }
    return true;
}

/* The header JSON, unpadded; NULL when out of memory. Free with cJSON_free. */
static char *build_header(const st_item *items, int count, const tl_metadata_entry *const *meta,
                          int metadata_count) {
    cJSON *root = cJSON_CreateObject();
    bool ok = root != NULL;
    if (ok && metadata_count > 0) {
        cJSON *object = cJSON_AddObjectToObject(root, "__metadata__");
        ok = object != NULL;
        for (int i = 0; ok && i < metadata_count; i++)
            ok = cJSON_AddStringToObject(object, meta[i]->key, meta[i]->value) != NULL;
    }
    for (int i = 0; ok && i < count; i++) {
        const tl_tensor *t = items[i].tensor;
        char text[TL_MAX_DIMS * 22 + 8];
        int used = snprintf(text, sizeof text, "[");
        for (int d = 0; d < t->ndim; d++)
            used += snprintf(text + used, sizeof text - (size_t)used, "%s%" PRId64, d ? "," : "",
                             t->shape[d]);
        snprintf(text + used, sizeof text - (size_t)used, "]");
        cJSON *object = cJSON_AddObjectToObject(root, items[i].name);
        ok = object && cJSON_AddStringToObject(object, "dtype", items[i].dtype->name) &&
             add_raw(object, "shape", text);
        if (ok) {
            snprintf(text, sizeof text, "[%" PRIu64 ",%" PRIu64 "]", items[i].begin,
                     items[i].begin + items[i].nbytes);
            ok = add_raw(object, "data_offsets", text);
        }
    }
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return json;
}

/* Writes one tensor's bytes, little-endian and row-major: returns 0 or an
   errno value, and sets status (with the message) when the tensor cannot be
   copied to the host. */
static int write_tensor(int fd, const char *path, const st_item *item, tl_status *status) {
    const tl_tensor *t = item->tensor;
    if (item->nbytes == 0) return 0;
    bool swap = !host_is_little_endian() && item->dtype->size > 1;
    if (t->storage->device.type == TL_DEVICE_CPU && tl_is_contiguous(t) && !swap)
        return write_all(fd, tl_data(t), (size_t)item->nbytes);
    void *host = malloc((size_t)item->nbytes);
    if (!host) {
        *status =
            tl_error(TL_ERR_MEMORY, "save: out of memory copying tensor '%s' (%" PRIu64 " bytes)",
                     item->name, item->nbytes);
        return 0;
    }
    *status = tl_to_host(t, host);
    int err = 0;
    if (*status != TL_OK) {
        char reason[512];
        snprintf(reason, sizeof reason, "%s", tl_last_error());
        *status =
            file_error(*status, "save", path, "cannot copy tensor '%s': %s", item->name, reason);
    } else {
        if (swap) swap_bytes(host, (size_t)(item->nbytes / item->dtype->size), item->dtype->size);
        err = write_all(fd, host, (size_t)item->nbytes);
    }
    free(host);
    return err;
}

/* Writes the header and the data to fd (the temporary file). */
static tl_status write_file(int fd, const char *path, const char *tmp, st_item *items, int count,
                            const tl_metadata_entry *const *meta, int metadata_count) {
    /* layout: offsets in data order */
    st_item **layout = malloc((size_t)(count ? count : 1) * sizeof *layout);
    if (!layout) return tl_error(TL_ERR_MEMORY, "save: out of memory");
    for (int i = 0; i < count; i++) layout[i] = &items[i];
    qsort(layout, (size_t)count, sizeof *layout, compare_item_layout);
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        layout[i]->begin = offset;
        offset += layout[i]->nbytes;
    }

    char *json = build_header(items, count, meta, metadata_count);
    if (!json) {
        free(layout);
        return tl_error(TL_ERR_MEMORY, "save: out of memory building the header of '%s'", path);
    }
    size_t length = strlen(json), padded = (length + 7) / 8 * 8;
    if (padded > ST_MAX_HEADER) {
        cJSON_free(json);
        free(layout);
        return file_error(TL_ERR_ARGUMENT, "save", path,
                          "header of %zu bytes exceeds the limit of %llu bytes", padded,
                          ST_MAX_HEADER);
    }
    unsigned char *head = malloc(8 + padded);
    if (!head) {
        cJSON_free(json);
        free(layout);
        return tl_error(TL_ERR_MEMORY, "save: out of memory building the header of '%s'", path);
    }
    for (int b = 0; b < 8; b++) head[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    memcpy(head + 8, json, length);
    memset(head + 8 + length, ' ', padded - length);
    cJSON_free(json);

    tl_status status = TL_OK;
    int err = write_all(fd, head, 8 + padded);
    free(head);
    for (int i = 0; i < count && !err && status == TL_OK; i++)
        err = write_tensor(fd, path, layout[i], &status);
    free(layout);
    if (status != TL_OK) return status;
    if (err)
        return file_error(TL_ERR_RUNTIME, "save", path, "cannot write temporary file '%s': %s", tmp,
                          strerror(err));
    return TL_OK;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static void sync_directory(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems cannot sync a directory */
        close(fd);
    }
    free(dir);
}

tl_status tl_save_safetensors(const char *path, const tl_named_tensor *tensors, int count,
                              const tl_metadata_entry *metadata, int metadata_count) {
    TL_TRY(check_save_arguments(path, tensors, count, metadata, metadata_count));

    st_item *items = calloc((size_t)(count ? count : 1), sizeof *items);
    const tl_metadata_entry **meta =
        malloc((size_t)(metadata_count ? metadata_count : 1) * sizeof *meta);
    char *tmp = malloc(strlen(path) + 64);
    tl_status status = TL_OK;
    if (!items || !meta || !tmp) {
        status = tl_error(TL_ERR_MEMORY, "save: out of memory");
        goto done;
    }
    for (int i = 0; i < count; i++) {
        const tl_tensor *t = tensors[i].tensor;
        items[i].name = tensors[i].name;
        items[i].tensor = t;
        items[i].dtype = st_dtype_for(t->dtype);
        items[i].nbytes = (uint64_t)tl_numel(t) * items[i].dtype->size;
    }
    qsort(items, (size_t)count, sizeof *items, compare_item_names);
    for (int i = 1; i < count; i++)
        if (strcmp(items[i - 1].name, items[i].name) == 0) {
            status = file_error(TL_ERR_ARGUMENT, "save", path, "two tensors are named '%s'",
                                items[i].name);
            goto done;
        }
    for (int i = 0; i < metadata_count; i++) meta[i] = &metadata[i];
    qsort(meta, (size_t)metadata_count, sizeof *meta, compare_metadata_keys);
    for (int i = 1; i < metadata_count; i++)
        if (strcmp(meta[i - 1]->key, meta[i]->key) == 0) {
            status = file_error(TL_ERR_ARGUMENT, "save", path, "two metadata entries have key '%s'",
                                meta[i]->key);
            goto done;
        }

    static atomic_ulong serial;
    snprintf(tmp, strlen(path) + 64, "%s.tmp.%ld.%lu", path, (long)getpid(),
             (unsigned long)atomic_fetch_add(&serial, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        status = file_error(TL_ERR_RUNTIME, "save", path, "cannot create temporary file '%s': %s",
                            tmp, strerror(errno));
        goto done;
    }
    status = write_file(fd, path, tmp, items, count, meta, metadata_count);
    if (status == TL_OK && fsync(fd) != 0)
        status = file_error(TL_ERR_RUNTIME, "save", path, "cannot flush temporary file '%s': %s",
                            tmp, strerror(errno));
    if (close(fd) != 0 && status == TL_OK)
        status = file_error(TL_ERR_RUNTIME, "save", path, "cannot close temporary file '%s': %s",
                            tmp, strerror(errno));
    if (status == TL_OK && rename(tmp, path) != 0)
        status = file_error(TL_ERR_RUNTIME, "save", path, "cannot rename '%s' to it: %s", tmp,
                            strerror(errno));
    if (status != TL_OK)
        unlink(tmp);
    else
        sync_directory(path);

done:
    free(items);
    free(meta);
    free(tmp);
    return status;
}

/* ---- load ------------------------------------------------------------------ */

typedef struct st_entry {
    const char *name; /* points into the parsed JSON */
    const st_dtype *dtype;
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static int compare_entry_names(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int compare_entry_begins(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int compare_json_keys(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* A JSON number that is an exact non-negative integer. */
static bool json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double d = item->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_JSON_INT) || (double)(uint64_t)d != d) return false;
    *out = (uint64_t)d;
    return true;
}

static const char *json_kind(const cJSON *item) {
    if (cJSON_IsObject(item)) return "an object";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsBool(item)) return "a boolean";
    return "null";
}

/* Reads one tensor's description from the header and checks it against the
   data buffer's size. */
static tl_status parse_entry(const char *path, const cJSON *item, uint64_t data_size, st_entry *e) {
    const char *name = item->string;
    e->name = name;
    if (!cJSON_IsObject(item))
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': expected an object with dtype, shape and data_offsets, "
                          "got %s",
                          name, json_kind(item));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype))
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': expected a \"dtype\" "
                          "string, got %s",
                          name, dtype ? json_kind(dtype) : "none");
    e->dtype = st_dtype_by_name(dtype->valuestring);
    if (!e->dtype)
        return file_error(
            TL_ERR_DTYPE, "load", path,
            "tensor '%s' has dtype '%s', which tlua cannot load (it loads " ST_SUPPORTED ")", name,
            dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': expected a \"shape\" "
                          "array, got %s",
                          name, shape ? json_kind(shape) : "none");
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > TL_MAX_DIMS)
        return file_error(TL_ERR_SHAPE, "load", path,
                          "tensor '%s' has %d dims, more than the %d "
                          "tlua supports",
                          name, ndim, TL_MAX_DIMS);
    e->ndim = ndim;
    int d = 0;
    bool has_zero = false;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t size;
        if (!json_uint(dim, &size))
            return file_error(TL_ERR_ARGUMENT, "load", path,
                              "tensor '%s': dim %d of \"shape\" "
                              "is not a non-negative integer",
                              name, d + 1);
        e->shape[d] = (int64_t)size;
        has_zero = has_zero || size == 0;
    }
    uint64_t numel = has_zero ? 0 : 1;
    bool too_big = false;
    for (d = 0; !has_zero && !too_big && d < ndim; d++) {
        uint64_t size = (uint64_t)e->shape[d];
        if (numel > UINT64_MAX / 8 / size)
            too_big = true;
        else
            numel *= size;
    }

    uint64_t range[2];
    int n = 0;
    if (cJSON_IsArray(offsets) && cJSON_GetArraySize(offsets) == 2)
        for (const cJSON *v = offsets->child; v && json_uint(v, &range[n]); v = v->next) n++;
    if (n != 2)
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': expected \"data_offsets\" "
                          "[begin, end] of two non-negative integers",
                          name);
    e->begin = range[0], e->end = range[1];
    if (e->begin > e->end)
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          "] end before they begin",
                          name, e->begin, e->end);
    if (e->end > data_size)
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] exceed the %" PRIu64
                          " bytes of data after the header",
                          name, e->begin, e->end, data_size);
    if (too_big)
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': its shape has too many elements for any file", name);
    if (numel * e->dtype->size != e->end - e->begin)
        return file_error(TL_ERR_ARGUMENT, "load", path,
                          "tensor '%s': %" PRIu64 " elements of %s need %" PRIu64
                          " bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                          name, numel, e->dtype->name, numel * e->dtype->size, e->begin, e->end,
                          e->end - e->begin);
    return TL_OK;
}

/* Checks what the header says; fills entries (sorted by name) and meta
   (the "__metadata__" items, sorted by key). */
static tl_status parse_header(const char *path, const cJSON *root, uint64_t data_size,
                              st_entry *entries, int *count, const cJSON **meta,
                              int *metadata_count) {
    if (!cJSON_IsObject(root))
        return file_error(TL_ERR_ARGUMENT, "load", path, "header is %s, expected a JSON object",
                          json_kind(root));
    const cJSON *metadata = NULL;
    int n = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (metadata)
                return file_error(TL_ERR_ARGUMENT, "load", path,
                                  "header has two \"__metadata__\" objects");
            metadata = item;
            continue;
        }
        TL_TRY(parse_entry(path, item, data_size, &entries[n]));
        n++;
    }

    qsort(entries, (size_t)n, sizeof *entries, compare_entry_names);
    for (int i = 1; i < n; i++)
        if (strcmp(entries[i - 1].name, entries[i].name) == 0)
            return file_error(TL_ERR_ARGUMENT, "load", path, "header names two tensors '%s'",
                              entries[i].name);
    /* overlaps: sort the non-empty ranges by their beginning */
    const st_entry **by_begin = malloc((size_t)(n ? n : 1) * sizeof *by_begin);
    if (!by_begin) return tl_error(TL_ERR_MEMORY, "load: out of memory reading '%s'", path);
    int ranges = 0;
    for (int i = 0; i < n; i++)
        if (entries[i].end > entries[i].begin) by_begin[ranges++] = &entries[i];
    qsort(by_begin, (size_t)ranges, sizeof *by_begin, compare_entry_begins);
    for (int i = 1; i < ranges; i++)
        if (by_begin[i]->begin < by_begin[i - 1]->end) {
            tl_status status =
                file_error(TL_ERR_ARGUMENT, "load", path,
                           "tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64 ", %" PRIu64
                           "] overlap in the data",
                           by_begin[i - 1]->name, by_begin[i - 1]->begin, by_begin[i - 1]->end,
                           by_begin[i]->name, by_begin[i]->begin, by_begin[i]->end);
            free(by_begin);
            return status;
        }
    free(by_begin);

    int m = 0;
    if (metadata) {
        if (!cJSON_IsObject(metadata))
            return file_error(TL_ERR_ARGUMENT, "load", path,
                              "\"__metadata__\" is %s, expected an object of strings",
                              json_kind(metadata));
        for (const cJSON *item = metadata->child; item; item = item->next) {
            if (!cJSON_IsString(item))
                return file_error(TL_ERR_ARGUMENT, "load", path,
                                  "metadata '%s' is %s, expected a string", item->string,
                                  json_kind(item));
            meta[m++] = item;
        }
        qsort(meta, (size_t)m, sizeof *meta, compare_json_keys);
        for (int i = 1; i < m; i++)
            if (strcmp(meta[i - 1]->string, meta[i]->string) == 0)
                return file_error(TL_ERR_ARGUMENT, "load", path, "metadata has two keys '%s'",
                                  meta[i]->string);
    }
    *count = n;
    *metadata_count = m;
    return TL_OK;
}

/* Widens n little-endian file elements at src into dst (int32 or int64). */
static void widen(st_conv conv, const unsigned char *src, void *dst, size_t n) {
    int32_t *d32 = dst;
    int64_t *d64 = dst;
    for (size_t i = 0; i < n; i++) {
        switch (conv) {
        case ST_U8:
            d32[i] = src[i];
            break;
        case ST_I8:
            d32[i] = (int32_t)src[i] - (src[i] & 0x80 ? 256 : 0);
            break;
        case ST_U16:
            d32[i] = src[2 * i] | src[2 * i + 1] << 8;
            break;
        case ST_I16: {
            int32_t v = src[2 * i] | src[2 * i + 1] << 8;
            d32[i] = v - (v & 0x8000 ? 65536 : 0);
            break;
        }
        case ST_U32:
            d64[i] = (int64_t)((uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                               (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24);
            break;
        default:
            break;
        }
    }
}

/* Reads one tensor's data into t: 0, an errno value, -1 at an early end of
   file, or ENOMEM. */
static int read_tensor(int fd, const st_entry *e, uint64_t data_start, tl_tensor *t) {
    size_t nbytes = (size_t)(e->end - e->begin), size = e->dtype->size;
    if (nbytes == 0) return 0;
    if (e->dtype->conv == ST_SAME || e->dtype->conv == ST_BOOL) {
        int err = read_at(fd, tl_data(t), nbytes, data_start + e->begin);
        if (err) return err;
        if (!host_is_little_endian() && size > 1) swap_bytes(tl_data(t), nbytes / size, size);
        if (e->dtype->conv == ST_BOOL) {
            unsigned char *b = tl_data(t);
            for (size_t i = 0; i < nbytes; i++) b[i] = b[i] != 0;
        }
        return 0;
    }
    unsigned char *chunk = malloc(ST_CONVERT_CHUNK);
    if (!chunk) return ENOMEM;
    char *dst = tl_data(t);
    size_t out_size = tl_dtype_size(t->dtype);
    int err = 0;
    for (size_t done = 0; done < nbytes && !err;) {
        size_t part = nbytes - done < ST_CONVERT_CHUNK ? nbytes - done : ST_CONVERT_CHUNK;
        err = read_at(fd, chunk, part, data_start + e->begin + done);
        if (!err) widen(e->dtype->conv, chunk, dst + done / size * out_size, part / size);
        done += part;
    }
    free(chunk);
    return err;
}

/* Allocates and fills the results, all or nothing. */
static tl_status load_tensors(const char *path, int fd, uint64_t data_start,
                              const st_entry *entries, int count, const cJSON *const *meta,
                              int metadata_count, tl_named_tensor **tensors_out,
                              tl_metadata_entry **metadata_out) {
    tl_named_tensor *tensors = calloc((size_t)(count ? count : 1), sizeof *tensors);
    tl_metadata_entry *metadata =
        calloc((size_t)(metadata_count ? metadata_count : 1), sizeof *metadata);
    tl_status status = TL_OK;
    if (!tensors || !metadata) status = tl_error(TL_ERR_MEMORY, "load: out of memory");
    for (int i = 0; status == TL_OK && i < metadata_count; i++) {
        metadata[i].key = strdup(meta[i]->string);
        metadata[i].value = strdup(meta[i]->valuestring);
        if (!metadata[i].key || !metadata[i].value)
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
    }
    for (int i = 0; status == TL_OK && i < count; i++) {
        const st_entry *e = &entries[i];
        tensors[i].name = strdup(e->name);
        if (!tensors[i].name) {
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
            break;
        }
        status = tl_empty(e->shape, e->ndim, e->dtype->dtype, TL_CPU, &tensors[i].tensor);
        if (status != TL_OK) {
            char reason[512];
            snprintf(reason, sizeof reason, "%s", tl_last_error());
            status = file_error(status, "load", path, "tensor '%s': %s", e->name, reason);
            break;
        }
        int err = read_tensor(fd, e, data_start, tensors[i].tensor);
        if (err == ENOMEM)
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
        else if (err)
            status = file_error(TL_ERR_RUNTIME, "load", path, "cannot read tensor '%s': %s",
                                e->name, read_error_text(err));
    }
    if (status != TL_OK) {
        tl_safetensors_free(tensors, tensors ? count : 0, metadata, metadata ? metadata_count : 0);
        return status;
    }
    *tensors_out = tensors;
    *metadata_out = metadata;
    return TL_OK;
}

tl_status tl_load_safetensors(const char *path, tl_named_tensor **tensors, int *count,
                              tl_metadata_entry **metadata, int *metadata_count) {
    if (!path || !*path) return tl_error(TL_ERR_ARGUMENT, "load: expected a file path, got none");
    if (!tensors || !count)
        return file_error(TL_ERR_ARGUMENT, "load", path, "no place given for the tensors");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return file_error(TL_ERR_RUNTIME, "load", path, "cannot open: %s", strerror(errno));

    tl_status status = TL_OK;
    char *header = NULL;
    cJSON *root = NULL;
    st_entry *entries = NULL;
    const cJSON **meta = NULL;
    struct stat info;
    unsigned char prefix[8];
    int err;
    if (fstat(fd, &info) != 0) {
        status = file_error(TL_ERR_RUNTIME, "load", path, "cannot stat: %s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(info.st_mode)) {
        status = file_error(TL_ERR_ARGUMENT, "load", path, "not a regular file");
        goto done;
    }
    uint64_t file_size = (uint64_t)info.st_size;
    if (file_size < 8) {
        status = file_error(TL_ERR_ARGUMENT, "load", path,
                            "file has %" PRIu64 " bytes, too few "
                            "for the 8-byte header length of a safetensors file",
                            file_size);
        goto done;
    }
    if ((err = read_at(fd, prefix, 8, 0)) != 0) {
        status = file_error(TL_ERR_RUNTIME, "load", path, "cannot read: %s", read_error_text(err));
        goto done;
    }
    uint64_t length = 0;
    for (int b = 7; b >= 0; b--) length = length << 8 | prefix[b];
    if (length > file_size - 8) {
        status = file_error(TL_ERR_ARGUMENT, "load", path,
                            "header length %" PRIu64 " exceeds "
                            "the %" PRIu64 " bytes after the length field (file size %" PRIu64 ")",
                            length, file_size - 8, file_size);
        goto done;
    }
    if (length > ST_MAX_HEADER) {
        status = file_error(TL_ERR_ARGUMENT, "load", path,
                            "header length %" PRIu64 " exceeds "
                            "the limit of %llu bytes",
                            length, ST_MAX_HEADER);
        goto done;
    }
    header = malloc((size_t)length + 1);
    if (!header) {
        status = tl_error(TL_ERR_MEMORY, "load: out of memory reading the header of '%s'", path);
        goto done;
    }
    if ((err = read_at(fd, header, (size_t)length, 8)) != 0) {
        status = file_error(TL_ERR_RUNTIME, "load", path, "cannot read the header: %s",
                            read_error_text(err));
        goto done;
    }
    header[length] = '\0';
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(header, (size_t)length, &end, false);
    if (!root) {
        status = file_error(TL_ERR_ARGUMENT, "load", path,
                            "header is not valid JSON (error "
                            "near byte %td of %" PRIu64 ")",
                            end ? end - header : 0, length);
        goto done;
    }
    for (const char *p = end; p < header + length; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            status = file_error(TL_ERR_ARGUMENT, "load", path,
                                "header has bytes other than "
                                "spaces after its JSON object (at byte %td of %" PRIu64 ")",
                                p - header, length);
            goto done;
        }

    const cJSON *metadata_object = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    int meta_size = cJSON_IsObject(metadata_object) ? cJSON_GetArraySize(metadata_object) : 0;
    entries = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof *entries);
    meta = calloc((size_t)meta_size + 1, sizeof *meta);
    if (!entries || !meta) {
        status = tl_error(TL_ERR_MEMORY, "load: out of memory reading '%s'", path);
        goto done;
    }
    int n = 0, m = 0;
    status = parse_header(path, root, file_size - 8 - length, entries, &n, meta, &m);
    if (status != TL_OK) goto done;

    tl_named_tensor *loaded = NULL;
    tl_metadata_entry *loaded_metadata = NULL;
    status = load_tensors(path, fd, 8 + length, entries, n, meta, m, &loaded, &loaded_metadata);
    if (status != TL_OK) goto done;
    *tensors = loaded;
    *count = n;
    if (metadata && metadata_count) {
        *metadata = loaded_metadata;
        *metadata_count = m;
    } else {
        tl_safetensors_free(NULL, 0, loaded_metadata, m);
    }

done:
    free(entries);
    free(meta);
    cJSON_Delete(root);
    free(header);
    close(fd);
    return status;
}

void tl_safetensors_free(tl_named_tensor *tensors, int count, tl_metadata_entry *metadata,
                         int metadata_count) {
    for (int i = 0; tensors && i < count; i++) {
        free((void *)tensors[i].name);
        tl_release(tensors[i].tensor);
    }
    free(tensors);
    for (int i = 0; metadata && i < metadata_count; i++) {
        free((void *)metadata[i].key);
        free((void *)metadata[i].value);
    }
    free(metadata);
}
