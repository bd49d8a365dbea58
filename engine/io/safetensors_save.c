/* Writing safetensors checkpoints: the header and the data laid out so that the tensors tile the
 * data buffer exactly, written atomically (temporary file, fsync, rename). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_source.h"
#include "safetensors_format.h"
#include "core/size.h"

#define ST_IO_CHUNK ((size_t)1 << 30) /* bytes per write() call */

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
        return tl_io_error(TL_ERR_ARGUMENT, "save", path, "expected %d tensors, got none", count);
    if (metadata_count < 0 || (metadata_count > 0 && !metadata))
        return tl_io_error(TL_ERR_ARGUMENT, "save", path, "expected %d metadata entries, got none",
                           metadata_count);
    for (int i = 0; i < count; i++) {
        const char *name = tensors[i].name;
        if (!name)
            return tl_io_error(TL_ERR_ARGUMENT, "save", path, "tensor %d has no name", i + 1);
        if (!tensors[i].tensor)
            return tl_io_error(TL_ERR_ARGUMENT, "save", path, "tensor '%s' is NULL", name);
        if (!st_is_utf8(name, strlen(name), NULL))
            return tl_io_error(TL_ERR_ARGUMENT, "save", path, "tensor name '%s' is not valid UTF-8",
                               name);
        if (strcmp(name, "__metadata__") == 0)
            return tl_io_error(TL_ERR_ARGUMENT, "save", path,
                               "'__metadata__' is reserved and cannot name a tensor");
        if (!st_dtype_for(tensors[i].tensor->dtype))
            return tl_io_error(TL_ERR_DTYPE, "save", path,
                               "tensor '%s' has dtype %s, which has no "
                               "safetensors name",
                               name, tl_dtype_name(tensors[i].tensor->dtype));
        /* the loader reads JSON numbers exactly only below 2^53 (as most JSON readers do):
           refuse what could be written but not read back */
        const tl_tensor *t = tensors[i].tensor;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] >= ((int64_t)1 << 53))
                return tl_io_error(TL_ERR_SHAPE, "save", path,
                                   "tensor '%s': dim %d has size %" PRId64
                                   ", at least 2^53, which JSON readers cannot read exactly",
                                   name, d + 1, t->shape[d]);
    }
    for (int i = 0; i < metadata_count; i++) {
        const char *key = metadata[i].key, *value = metadata[i].value;
        if (!key)
            return tl_io_error(TL_ERR_ARGUMENT, "save", path, "metadata entry %d has no key",
                               i + 1);
        if (!value)
            return tl_io_error(TL_ERR_ARGUMENT, "save", path, "metadata '%s' has no value", key);
        if (!st_is_utf8(key, strlen(key), NULL) || !st_is_utf8(value, strlen(value), NULL))
            return tl_io_error(TL_ERR_ARGUMENT, "save", path,
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
    bool swap = !st_host_is_little_endian() && item->dtype->size > 1;
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
            tl_io_error(*status, "save", path, "cannot copy tensor '%s': %s", item->name, reason);
    } else {
        if (swap)
            st_swap_bytes(host, (size_t)(item->nbytes / item->dtype->size), item->dtype->size);
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
    int64_t offset = 0; /* each tensor begins where the one before ended: they tile the data */
    for (int i = 0; i < count; i++) {
        layout[i]->begin = (uint64_t)offset;
        if (!tl_size_add(offset, (int64_t)layout[i]->nbytes, &offset)) {
            free(layout);
            return tl_io_error(TL_ERR_ARGUMENT, "save", path,
                               "the tensors hold more than 2^62 bytes in all");
        }
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
        return tl_io_error(TL_ERR_ARGUMENT, "save", path,
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
        return tl_io_error(TL_ERR_RUNTIME, "save", path, "cannot write temporary file '%s': %s",
                           tmp, strerror(err));
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
        size_t nbytes;
        status = tl_size_bytes("save", tl_numel(t), t->dtype, &nbytes);
        if (status != TL_OK) goto done;
        items[i].nbytes = nbytes;
    }
    qsort(items, (size_t)count, sizeof *items, compare_item_names);
    for (int i = 1; i < count; i++)
        if (strcmp(items[i - 1].name, items[i].name) == 0) {
            status = tl_io_error(TL_ERR_ARGUMENT, "save", path, "two tensors are named '%s'",
                                 items[i].name);
            goto done;
        }
    for (int i = 0; i < metadata_count; i++) meta[i] = &metadata[i];
    qsort(meta, (size_t)metadata_count, sizeof *meta, compare_metadata_keys);
    for (int i = 1; i < metadata_count; i++)
        if (strcmp(meta[i - 1]->key, meta[i]->key) == 0) {
            status = tl_io_error(TL_ERR_ARGUMENT, "save", path,
                                 "two metadata entries have key '%s'", meta[i]->key);
            goto done;
        }

    static atomic_ulong serial;
    snprintf(tmp, strlen(path) + 64, "%s.tmp.%ld.%lu", path, (long)getpid(),
             (unsigned long)atomic_fetch_add(&serial, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        status = tl_io_error(TL_ERR_RUNTIME, "save", path, "cannot create temporary file '%s': %s",
                             tmp, strerror(errno));
        goto done;
    }
    status = write_file(fd, path, tmp, items, count, meta, metadata_count);
    if (status == TL_OK && fsync(fd) != 0)
        status = tl_io_error(TL_ERR_RUNTIME, "save", path, "cannot flush temporary file '%s': %s",
                             tmp, strerror(errno));
    if (close(fd) != 0 && status == TL_OK)
        status = tl_io_error(TL_ERR_RUNTIME, "save", path, "cannot close temporary file '%s': %s",
                             tmp, strerror(errno));
    if (status == TL_OK && rename(tmp, path) != 0)
        status = tl_io_error(TL_ERR_RUNTIME, "save", path, "cannot rename '%s' to it: %s", tmp,
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
