/* Loading safetensors checkpoints from a file or from memory, one code path: the header is read
 * and validated completely, then the tensors are allocated and filled (bool bytes as 0 or 1). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_source.h"
#include "loaders.h"
#include "safetensors_format.h"
#include "core/size.h"

#define ST_CONVERT_CHUNK ((size_t)1 << 20) /* bytes per conversion pass when widening */

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

/* Reads one tensor's data (at offset of the source) into t: 0, an errno value,
   -1 when the source ends early, or ENOMEM. */
static int read_tensor(const tl_io_source *source, const st_entry *e, uint64_t offset,
                       tl_tensor *t) {
    size_t nbytes = (size_t)(e->end - e->begin), size = e->dtype->size;
    if (nbytes == 0) return 0;
    if (e->dtype->conv == ST_SAME || e->dtype->conv == ST_BOOL) {
        int err = tl_io_read_at(source, tl_data(t), nbytes, offset);
        if (err) return err;
        if (!st_host_is_little_endian() && size > 1) st_swap_bytes(tl_data(t), nbytes / size, size);
        if (e->dtype->conv == ST_BOOL) { /* the engine reads bool storage as C bool: 0 or 1 */
            unsigned char *b = tl_data(t);
            for (size_t i = 0; i < nbytes; i++) b[i] = b[i] != 0;
        }
        return 0;
    }
    size_t chunk_size = nbytes < ST_CONVERT_CHUNK ? nbytes : ST_CONVERT_CHUNK;
    unsigned char *chunk = malloc(chunk_size);
    if (!chunk) return ENOMEM;
    char *dst = tl_data(t);
    size_t out_size = tl_dtype_size(t->dtype);
    int err = 0;
    for (size_t done = 0; done < nbytes && !err;) {
        size_t part = nbytes - done < chunk_size ? nbytes - done : chunk_size;
        err = tl_io_read_at(source, chunk, part, offset + done);
        if (!err) widen(e->dtype->conv, chunk, dst + done / size * out_size, part / size);
        done += part;
    }
    free(chunk);
    return err;
}

/* Allocates and fills the results, all or nothing. */
static tl_status load_tensors(const char *name, const tl_io_source *source, uint64_t data_start,
                              const st_header *h, tl_named_tensor **tensors_out,
                              tl_metadata_entry **metadata_out) {
    tl_named_tensor *tensors = calloc((size_t)(h->count ? h->count : 1), sizeof *tensors);
    tl_metadata_entry *metadata =
        calloc((size_t)(h->metadata_count ? h->metadata_count : 1), sizeof *metadata);
    tl_status status = TL_OK;
    if (!tensors || !metadata) status = tl_error(TL_ERR_MEMORY, "load: out of memory");
    for (int i = 0; status == TL_OK && i < h->metadata_count; i++) {
        metadata[i].key = strdup(h->meta[i]->string);
        metadata[i].value = strdup(h->meta[i]->valuestring);
        if (!metadata[i].key || !metadata[i].value)
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
    }
    for (int i = 0; status == TL_OK && i < h->count; i++) {
        const st_entry *e = &h->entries[i];
        int64_t offset;
        tensors[i].name = strdup(e->name);
        if (!tensors[i].name) {
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
            break;
        }
        status = tl_empty(e->shape, e->ndim, e->dtype->dtype, TL_CPU, &tensors[i].tensor);
        if (status != TL_OK) {
            char reason[512];
            snprintf(reason, sizeof reason, "%s", tl_last_error());
            status = tl_io_error(status, "load", name, "tensor '%s': %s", e->name, reason);
            break;
        }
        if (!tl_size_add((int64_t)data_start, (int64_t)e->begin, &offset)) {
            status = tl_io_error(TL_ERR_ARGUMENT, "load", name,
                                 "tensor '%s': its data begins beyond any file", e->name);
            break;
        }
        int err = read_tensor(source, e, (uint64_t)offset, tensors[i].tensor);
        if (err == ENOMEM)
            status = tl_error(TL_ERR_MEMORY, "load: out of memory");
        else if (err)
            status = tl_io_error(TL_ERR_RUNTIME, "load", name, "cannot read tensor '%s': %s",
                                 e->name, tl_io_read_error_text(err));
    }
    if (status != TL_OK) {
        tl_safetensors_free(tensors, tensors ? h->count : 0, metadata,
                            metadata ? h->metadata_count : 0);
        return status;
    }
    *tensors_out = tensors;
    *metadata_out = metadata;
    return TL_OK;
}

/* Reads the header length and the header; the length is checked before the
   header is allocated. *text (NUL-terminated) is the caller's to free. */
static tl_status read_header(const char *name, const tl_io_source *source, char **text,
                             uint64_t *length_out) {
    uint64_t file_size = source->size;
    if (file_size < 8)
        return tl_io_error(TL_ERR_ARGUMENT, "load", name,
                           "file has %" PRIu64 " bytes, too few for the 8-byte header length of a "
                           "safetensors file",
                           file_size);
    unsigned char prefix[8];
    int err = tl_io_read_at(source, prefix, 8, 0);
    if (err)
        return tl_io_error(TL_ERR_RUNTIME, "load", name, "cannot read: %s",
                           tl_io_read_error_text(err));
    uint64_t length = 0;
    for (int b = 7; b >= 0; b--) length = length << 8 | prefix[b];
    if (length > ST_MAX_HEADER)
        return tl_io_error(TL_ERR_ARGUMENT, "load", name,
                           "header length %" PRIu64 " exceeds the limit of %llu bytes", length,
                           ST_MAX_HEADER);
    if (length > file_size - 8)
        return tl_io_error(TL_ERR_ARGUMENT, "load", name,
                           "header length %" PRIu64 " exceeds the %" PRIu64
                           " bytes after the length field (file size %" PRIu64 ")",
                           length, file_size - 8, file_size);
    char *header = malloc((size_t)length + 1);
    if (!header)
        return tl_error(TL_ERR_MEMORY, "load: out of memory reading the header of '%s'", name);
    if ((err = tl_io_read_at(source, header, (size_t)length, 8)) != 0) {
        free(header);
        return tl_io_error(TL_ERR_RUNTIME, "load", name, "cannot read the header: %s",
                           tl_io_read_error_text(err));
    }
    header[length] = '\0';
    *text = header;
    *length_out = length;
    return TL_OK;
}

/* The one loading path, whatever the source. */
static tl_status load_source(const char *name, const tl_io_source *source,
                             tl_named_tensor **tensors, int *count, tl_metadata_entry **metadata,
                             int *metadata_count) {
    char *text = NULL;
    uint64_t length = 0;
    TL_TRY(read_header(name, source, &text, &length));
    st_header h;
    tl_status status = st_header_parse(name, text, (size_t)length, source->size - 8 - length, &h);
    if (status != TL_OK) {
        free(text);
        return status;
    }
    tl_named_tensor *loaded = NULL;
    tl_metadata_entry *loaded_metadata = NULL;
    status = load_tensors(name, source, 8 + length, &h, &loaded, &loaded_metadata);
    if (status == TL_OK) {
        *tensors = loaded;
        *count = h.count;
        if (metadata && metadata_count) {
            *metadata = loaded_metadata;
            *metadata_count = h.metadata_count;
        } else {
            tl_safetensors_free(NULL, 0, loaded_metadata, h.metadata_count);
        }
    }
    st_header_free(&h);
    free(text);
    return status;
}

tl_status tl_load_safetensors(const char *path, tl_named_tensor **tensors, int *count,
                              tl_metadata_entry **metadata, int *metadata_count) {
    if (!path || !*path) return tl_error(TL_ERR_ARGUMENT, "load: expected a file path, got none");
    if (!tensors || !count)
        return tl_io_error(TL_ERR_ARGUMENT, "load", path, "no place given for the tensors");
    tl_io_source source;
    TL_TRY(tl_io_open_file("load", path, &source));
    tl_status status = load_source(path, &source, tensors, count, metadata, metadata_count);
    tl_io_close(&source);
    return status;
}

tl_status tl_load_safetensors_buffer(const void *bytes, size_t size, const char *name,
                                     tl_named_tensor **tensors, int *count,
                                     tl_metadata_entry **metadata, int *metadata_count) {
    if (!name || !*name) name = "<memory>";
    if (!bytes && size)
        return tl_io_error(TL_ERR_ARGUMENT, "load", name, "expected %zu bytes, got none", size);
    if (!tensors || !count)
        return tl_io_error(TL_ERR_ARGUMENT, "load", name, "no place given for the tensors");
    tl_io_source source = tl_io_memory(bytes, size);
    return load_source(name, &source, tensors, count, metadata, metadata_count);
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
