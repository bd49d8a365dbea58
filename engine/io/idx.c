/* The IDX dataset format of MNIST, plain or gzip-compressed, read into one tensor. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tlua/io.h"

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

/* "read_idx: 'path': <message>" */
__attribute__((format(printf, 3, 4))) static tl_status idx_error(tl_status status, const char *path,
                                                                 const char *fmt, ...) {
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return tl_error(status, "read_idx: '%s': %s", path, message);
}

/* Reads up to n bytes; *got says how many. false on a read or gzip error. */
static bool read_some(gzFile file, void *buf, size_t n, size_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (n > 0) {
        unsigned want = n < ((unsigned)1 << 30) ? (unsigned)n : (unsigned)1 << 30;
        int r = gzread(file, p, want);
        if (r < 0) return false;
        if (r == 0) break;
        p += r, n -= (size_t)r, *got += (size_t)r;
    }
    int errnum;
    gzerror(file, &errnum);
    return errnum == Z_OK;
}

/* The reason of the last failed read_some. */
static tl_status read_failure(gzFile file, const char *path, const char *what) {
    int errnum;
    const char *message = gzerror(file, &errnum);
    if (errnum == Z_ERRNO)
        return idx_error(TL_ERR_RUNTIME, path, "cannot read %s: %s", what, strerror(errno));
    if (errnum == Z_MEM_ERROR) return tl_error(TL_ERR_MEMORY, "read_idx: out of memory");
    if (strncmp(message, "<fd:", 4) == 0 && strstr(message, ": ")) /* zlib's name for the file */
        message = strstr(message, ": ") + 2;
    return idx_error(TL_ERR_ARGUMENT, path, "gzip data is corrupt or truncated: %s", message);
}

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

/* Reads the magic and the dims; checks the data size against the file. */
static tl_status read_header(gzFile file, const char *path, uint64_t file_size,
                             const idx_type **type_out, int64_t *shape, int *ndim_out,
                             uint64_t *nbytes_out) {
    unsigned char magic[4], dims[4 * TL_MAX_DIMS];
    size_t got;
    if (!read_some(file, magic, 4, &got)) return read_failure(file, path, "the magic number");
    if (got < 4)
        return idx_error(TL_ERR_ARGUMENT, path,
                         "file has %zu bytes, too few for the 4-byte IDX "
                         "magic number",
                         got);
    if (magic[0] != 0 || magic[1] != 0)
        return idx_error(TL_ERR_ARGUMENT, path,
                         "bad magic number 0x%08" PRIx32 ": an IDX file "
                         "starts with two zero bytes, a type byte and the number of dims "
                         "(is it an IDX file?)",
                         be32(magic));
    const idx_type *type = NULL;
    for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
        if (idx_types[i].code == magic[2]) type = &idx_types[i];
    if (!type)
        return idx_error(TL_ERR_ARGUMENT, path,
                         "unknown element type 0x%02X in magic number "
                         "0x%08" PRIx32 " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)",
                         magic[2], be32(magic));
    int ndim = magic[3];
    if (ndim < 1 || ndim > TL_MAX_DIMS)
        return idx_error(TL_ERR_SHAPE, path,
                         "magic number 0x%08" PRIx32 " gives %d dims, "
                         "expected 1 to %d",
                         be32(magic), ndim, TL_MAX_DIMS);
    if (!read_some(file, dims, 4 * (size_t)ndim, &got)) return read_failure(file, path, "the dims");
    if (got < 4 * (size_t)ndim)
        return idx_error(TL_ERR_ARGUMENT, path,
                         "file ends inside the dims: %d dims need %d bytes, "
                         "found %zu",
                         ndim, 4 * ndim, got);
    uint64_t numel = 1;
    bool too_big = false;
    for (int d = 0; d < ndim; d++) {
        shape[d] = be32(dims + 4 * d);
        if (shape[d] != 0 && numel > (uint64_t)INT64_MAX / 8 / (uint64_t)shape[d])
            too_big = true;
        else
            numel *= (uint64_t)shape[d];
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) too_big = false, numel = 0;
    char text[TL_MAX_DIMS * 13 + 4];
    if (too_big)
        return idx_error(TL_ERR_SHAPE, path, "dims %s have too many elements",
                         shape_text(shape, ndim, text, sizeof text));
    uint64_t nbytes = numel * type->size, header = 4 + 4 * (uint64_t)ndim;
    if (gzdirect(file) && nbytes != file_size - header) /* plain: the size is known exactly */
        return idx_error(TL_ERR_ARGUMENT, path,
                         "dims %s of %s need %" PRIu64 " bytes of data, "
                         "the file has %" PRIu64 "%s",
                         shape_text(shape, ndim, text, sizeof text), type->name, nbytes,
                         file_size - header, nbytes > file_size - header ? " (truncated?)" : "");
    if (!gzdirect(file) && nbytes / IDX_MAX_INFLATE > file_size)
        return idx_error(TL_ERR_ARGUMENT, path,
                         "dims %s of %s need %" PRIu64 " bytes of data, "
                         "more than a gzip file of %" PRIu64 " bytes can hold",
                         shape_text(shape, ndim, text, sizeof text), type->name, nbytes, file_size);
    *type_out = type;
    *ndim_out = ndim;
    *nbytes_out = nbytes;
    return TL_OK;
}

/* Reads and decodes the data into t; then checks that nothing follows it. */
static tl_status read_data(gzFile file, const char *path, const idx_type *type, uint64_t nbytes,
                           tl_tensor *t) {
    unsigned char *chunk = malloc(IDX_CHUNK);
    if (!chunk) return tl_error(TL_ERR_MEMORY, "read_idx: out of memory");
    char *dst = tl_data(t), text[TL_MAX_DIMS * 13 + 4];
    size_t out_size = tl_dtype_size(t->dtype);
    tl_status status = TL_OK;
    for (uint64_t done = 0; done < nbytes;) {
        size_t part = nbytes - done < IDX_CHUNK ? (size_t)(nbytes - done) : IDX_CHUNK, got;
        if (!read_some(file, chunk, part, &got)) {
            status = read_failure(file, path, "the data");
            break;
        }
        if (got < part) {
            status = idx_error(TL_ERR_ARGUMENT, path,
                               "truncated: dims %s of %s need %" PRIu64
                               " bytes of data, the file has only %" PRIu64,
                               shape_text(t->shape, t->ndim, text, sizeof text), type->name, nbytes,
                               done + got);
            break;
        }
        decode(type, chunk, dst + done / type->size * out_size, part / type->size);
        done += part;
    }
    size_t extra = 0;
    if (status == TL_OK && !read_some(file, chunk, 1, &extra))
        status = read_failure(file, path, "the end of the data");
    else if (status == TL_OK && extra)
        status = idx_error(TL_ERR_ARGUMENT, path,
                           "more data than dims %s of %s need (%" PRIu64 " bytes)",
                           shape_text(t->shape, t->ndim, text, sizeof text), type->name, nbytes);
    free(chunk);
    return status;
}

tl_status tl_read_idx(const char *path, tl_tensor **out) {
    if (!path || !*path)
        return tl_error(TL_ERR_ARGUMENT, "read_idx: expected a file path, got none");
    if (!out) return idx_error(TL_ERR_ARGUMENT, path, "no place given for the tensor");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return idx_error(TL_ERR_RUNTIME, path, "cannot open: %s", strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0) {
        tl_status status = idx_error(TL_ERR_RUNTIME, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return status;
    }
    if (!S_ISREG(info.st_mode)) {
        close(fd);
        return idx_error(TL_ERR_ARGUMENT, path, "not a regular file");
    }
    gzFile file = gzdopen(fd, "rb");
    if (!file) {
        close(fd);
        return tl_error(TL_ERR_MEMORY, "read_idx: out of memory opening '%s'", path);
    }
    gzbuffer(file, 1 << 17);

    const idx_type *type = NULL;
    int64_t shape[TL_MAX_DIMS];
    int ndim = 0;
    uint64_t nbytes = 0;
    tl_tensor *t = NULL;
    tl_status status =
        read_header(file, path, (uint64_t)info.st_size, &type, shape, &ndim, &nbytes);
    if (status == TL_OK) {
        status = tl_empty(shape, ndim, type->dtype, TL_CPU, &t);
        if (status != TL_OK) {
            char reason[512];
            snprintf(reason, sizeof reason, "%s", tl_last_error());
            status = idx_error(status, path, "%s", reason);
        }
    }
    if (status == TL_OK) status = read_data(file, path, type, nbytes, t);
    gzclose(file);
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}
