/* The IDX dataset format of MNIST, plain or gzip-compressed, read into one tensor. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx_stream.h"
#include "io_source.h"
#include "loaders.h"
#include "core/size.h"

#define IDX_CHUNK       ((size_t)1 << 20) /* bytes decoded per pass */
#define IDX_MAX_INFLATE 1032              /* deflate expands at most about 1032:1 */

typedef struct idx_type {
    unsigned char code;
    const char *name;
    size_t size; /* bytes per element in the file */
    tl_dtype dtype;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "unsigned byte", 1, TL_I32}, {0x09, "signed byte", 1, TL_I32},
    {0x0B, "int16", 2, TL_I32},         {0x0C, "int32", 4, TL_I32},
    {0x0D, "float32", 4, TL_F32},       {0x0E, "float64", 8, TL_F64},
};

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Decodes n big-endian elements of type into dst (int32, float32 or float64). */
static void decode(const idx_type *type, const unsigned char *src, void *dst, size_t n) {
    int32_t *i32 = dst;
    for (size_t i = 0; i < n; i++) {
        switch (type->code) {
        case 0x08:
            i32[i] = src[i];
            break;
        case 0x09:
            i32[i] = (int32_t)src[i] - (src[i] & 0x80 ? 256 : 0);
            break;
        case 0x0B: {
            int32_t v = src[2 * i] << 8 | src[2 * i + 1];
            i32[i] = v - (v & 0x8000 ? 65536 : 0);
            break;
        }
        case 0x0C: {
            uint32_t u = be32(src + 4 * i);
            i32[i] = u > INT32_MAX ? (int32_t)(u - 2147483648u) - INT32_MAX - 1 : (int32_t)u;
            break;
        }
        case 0x0D: {
            uint32_t u = be32(src + 4 * i);
            memcpy((float *)dst + i, &u, sizeof u);
            break;
        }
        case 0x0E: {
            uint64_t u = (uint64_t)be32(src + 8 * i) << 32 | be32(src + 8 * i + 4);
            memcpy((double *)dst + i, &u, sizeof u);
            break;
        }
        }
    }
}

static const char *shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* The magic number: the element type and the number of dims. */
static tl_status read_magic(idx_stream *stream, const char *name, const idx_type **type_out,
                            int *ndim_out) {
    unsigned char magic[4];
    size_t got;
    TL_TRY(idx_stream_read(stream, magic, 4, &got));
    if (got < 4)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "file has %zu bytes, too few for the 4-byte IDX magic number", got);
    if (magic[0] != 0 || magic[1] != 0)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "bad magic number 0x%08" PRIx32 ": an IDX file starts with two zero "
                           "bytes, a type byte and the number of dims (is it an IDX file?)",
                           be32(magic));
    const idx_type *type = NULL;
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == magic[2]) type = &idx_types[i];
    if (!type)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "unknown element type 0x%02X in magic number 0x%08" PRIx32
                           " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)",
                           magic[2], be32(magic));
    int ndim = magic[3];
    if (ndim < 1 || ndim > TL_MAX_DIMS)
        return tl_io_error(TL_ERR_SHAPE, "read_idx", name,
                           "magic number 0x%08" PRIx32 " gives %d dims, expected 1 to %d",
                           be32(magic), ndim, TL_MAX_DIMS);
    *type_out = type;
    *ndim_out = ndim;
    return TL_OK;
}

/* Reads the magic and the dims; checks the data size against the file before
   anything is allocated. */
static tl_status read_header(idx_stream *stream, const char *name, const idx_type **type_out,
                             int64_t *shape, int *ndim_out, int64_t *nbytes_out) {
    const idx_type *type = NULL;
    int ndim = 0;
    TL_TRY(read_magic(stream, name, &type, &ndim));
    unsigned char dims[4 * TL_MAX_DIMS];
    size_t got;
    TL_TRY(idx_stream_read(stream, dims, 4 * (size_t)ndim, &got));
    if (got < 4 * (size_t)ndim)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "file ends inside the dims: %d dims need %d bytes, found %zu", ndim,
                           4 * ndim, got);
    for (int d = 0; d < ndim; d++) shape[d] = be32(dims + 4 * d);
    char op[1024], text[TL_MAX_DIMS * 13 + 4];
    snprintf(op, sizeof op, "read_idx: '%s'", name);
    int64_t numel, nbytes;
    TL_TRY(tl_shape_numel(op, shape, ndim, &numel));
    shape_text(shape, ndim, text, sizeof text);
    if (!tl_size_mul(numel, (int64_t)type->size, &nbytes))
        return tl_io_error(TL_ERR_SHAPE, "read_idx", name,
                           "dims %s of %s need more than 2^62 bytes of data", text, type->name);
    uint64_t file_size = stream->source->size, header = 4 + 4 * (uint64_t)ndim;
    if (!stream->gzip && (uint64_t)nbytes != file_size - header) /* plain: the size is exact */
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "dims %s of %s need %" PRId64 " bytes of data, the file has %" PRIu64
                           "%s",
                           text, type->name, nbytes, file_size - header,
                           (uint64_t)nbytes > file_size - header ? " (truncated?)" : "");
    if (stream->gzip && (uint64_t)nbytes / IDX_MAX_INFLATE > file_size)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                           "dims %s of %s need %" PRId64 " bytes of data, more than a gzip file "
                           "of %" PRIu64 " bytes can hold",
                           text, type->name, nbytes, file_size);
    *type_out = type;
    *ndim_out = ndim;
    *nbytes_out = nbytes;
    return TL_OK;
}

/* Reads and decodes the data into t; then checks that nothing follows it. */
static tl_status read_data(idx_stream *stream, const char *name, const idx_type *type,
                           int64_t nbytes, tl_tensor *t) {
    size_t chunk_size = (uint64_t)nbytes < IDX_CHUNK ? (size_t)nbytes + 1 : IDX_CHUNK;
    unsigned char *chunk = malloc(chunk_size);
    if (!chunk) return tl_error(TL_ERR_MEMORY, "read_idx: out of memory");
    char *dst = tl_data(t), text[TL_MAX_DIMS * 13 + 4];
    shape_text(t->shape, t->ndim, text, sizeof text);
    size_t out_size = tl_dtype_size(t->dtype);
    tl_status status = TL_OK;
    for (uint64_t done = 0; done < (uint64_t)nbytes;) {
        uint64_t left = (uint64_t)nbytes - done;
        size_t part = left < chunk_size ? (size_t)left : chunk_size, got;
        status = idx_stream_read(stream, chunk, part, &got);
        if (status != TL_OK) break;
        if (got < part) {
            status = tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                                 "truncated: dims %s of %s need %" PRId64
                                 " bytes of data, the file has only %" PRIu64,
                                 text, type->name, nbytes, done + got);
            break;
        }
        decode(type, chunk, dst + done / type->size * out_size, part / type->size);
        done += part;
    }
    size_t extra = 0;
    if (status == TL_OK) status = idx_stream_read(stream, chunk, 1, &extra);
    if (status == TL_OK && extra)
        status = tl_io_error(TL_ERR_ARGUMENT, "read_idx", name,
                             "more data than dims %s of %s need (%" PRId64 " bytes)", text,
                             type->name, nbytes);
    free(chunk);
    return status;
}

/* The one reading path, whatever the source. */
static tl_status read_source(const char *name, const tl_io_source *source, tl_tensor **out) {
    idx_stream stream;
    TL_TRY(idx_stream_open(&stream, source, name));
    const idx_type *type = NULL;
    int64_t shape[TL_MAX_DIMS], nbytes = 0;
    int ndim = 0;
    tl_tensor *t = NULL;
    tl_status status = read_header(&stream, name, &type, shape, &ndim, &nbytes);
    if (status == TL_OK) {
        status = tl_empty(shape, ndim, type->dtype, TL_CPU, &t);
        if (status != TL_OK) {
            char reason[512];
            snprintf(reason, sizeof reason, "%s", tl_last_error());
            status = tl_io_error(status, "read_idx", name, "%s", reason);
        }
    }
    if (status == TL_OK) status = read_data(&stream, name, type, nbytes, t);
    idx_stream_close(&stream);
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}

tl_status tl_read_idx(const char *path, tl_tensor **out) {
    if (!path || !*path)
        return tl_error(TL_ERR_ARGUMENT, "read_idx: expected a file path, got none");
    if (!out)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", path, "no place given for the tensor");
    tl_io_source source;
    TL_TRY(tl_io_open_file("read_idx", path, &source));
    tl_status status = read_source(path, &source, out);
    tl_io_close(&source);
    return status;
}

tl_status tl_read_idx_buffer(const void *bytes, size_t size, const char *name, tl_tensor **out) {
    if (!name || !*name) name = "<memory>";
    if (!bytes && size)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name, "expected %zu bytes, got none", size);
    if (!out)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", name, "no place given for the tensor");
    tl_io_source source = tl_io_memory(bytes, size);
    return read_source(name, &source, out);
}
