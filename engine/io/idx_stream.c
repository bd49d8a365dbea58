/* Reading an IDX file's bytes in order: plain, or gzip inflated member by member with zlib. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "idx_stream.h"

#define IDX_INPUT_CHUNK ((size_t)1 << 17) /* compressed bytes read per pass */

tl_status idx_stream_open(idx_stream *stream, const tl_io_source *source, const char *name) {
    *stream = (idx_stream){.source = source, .name = name};
    unsigned char magic[2];
    if (source->size < 2 || tl_io_read_at(source, magic, 2, 0) != 0 || magic[0] != 0x1F ||
        magic[1] != 0x8B)
        return TL_OK; /* plain (a read error shows when the data is read) */
    stream->gzip = true;
    stream->in_capacity = source->size < IDX_INPUT_CHUNK ? (size_t)source->size : IDX_INPUT_CHUNK;
    stream->in = malloc(stream->in_capacity);
    if (!stream->in) return tl_error(TL_ERR_MEMORY, "read_idx: out of memory");
    int r = inflateInit2(&stream->z, 16 + MAX_WBITS); /* gzip wrapper only */
    if (r != Z_OK) {
        free(stream->in);
        stream->in = NULL;
        return r == Z_MEM_ERROR ? tl_error(TL_ERR_MEMORY, "read_idx: out of memory")
                                : tl_io_error(TL_ERR_RUNTIME, "read_idx", name,
                                              "cannot start zlib: error %d", r);
    }
    stream->inflating = true;
    return TL_OK;
}

static tl_status read_plain(idx_stream *stream, void *buf, size_t n, size_t *got) {
    uint64_t left = stream->source->size - stream->position;
    size_t want = left < n ? (size_t)left : n;
    int err = tl_io_read_at(stream->source, buf, want, stream->position);
    if (err)
        return tl_io_error(TL_ERR_RUNTIME, "read_idx", stream->name, "cannot read: %s",
                           tl_io_read_error_text(err));
    stream->position += want;
    *got = want;
    return TL_OK;
}

/* Takes more compressed bytes from the source into the input buffer. */
static tl_status refill(idx_stream *stream) {
    uint64_t left = stream->source->size - stream->position;
    if (left == 0)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", stream->name,
                           "gzip data is truncated: the file ends inside the compressed stream");
    size_t want = left < stream->in_capacity ? (size_t)left : stream->in_capacity;
    int err = tl_io_read_at(stream->source, stream->in, want, stream->position);
    if (err)
        return tl_io_error(TL_ERR_RUNTIME, "read_idx", stream->name, "cannot read: %s",
                           tl_io_read_error_text(err));
    stream->position += want;
    stream->z.next_in = stream->in;
    stream->z.avail_in = (uInt)want;
    return TL_OK;
}

/* A member ended: the data ends with the file, or another member follows. */
static tl_status next_member(idx_stream *stream) {
    uint64_t next = stream->position - stream->z.avail_in, left = stream->source->size - next;
    if (left == 0) {
        stream->ended = true;
        return TL_OK;
    }
    unsigned char magic[2] = {0, 0};
    int err = tl_io_read_at(stream->source, magic, left < 2 ? (size_t)left : 2, next);
    if (err)
        return tl_io_error(TL_ERR_RUNTIME, "read_idx", stream->name, "cannot read: %s",
                           tl_io_read_error_text(err));
    if (magic[0] != 0x1F || magic[1] != 0x8B)
        return tl_io_error(TL_ERR_ARGUMENT, "read_idx", stream->name,
                           "%llu bytes after the end of the gzip data are not gzip",
                           (unsigned long long)left);
    if (inflateReset(&stream->z) != Z_OK)
        return tl_io_error(TL_ERR_RUNTIME, "read_idx", stream->name, "cannot restart zlib");
    return TL_OK;
}

static tl_status read_gzip(idx_stream *stream, void *buf, size_t n, size_t *got) {
    unsigned char *out = buf;
    size_t done = 0;
    while (done < n && !stream->ended) {
        if (stream->z.avail_in == 0) TL_TRY(refill(stream));
        size_t part = n - done < UINT_MAX ? n - done : UINT_MAX;
        stream->z.next_out = out + done;
        stream->z.avail_out = (uInt)part;
        uInt avail_in = stream->z.avail_in;
        int r = inflate(&stream->z, Z_NO_FLUSH);
        done += part - stream->z.avail_out;
        bool stuck = r == Z_BUF_ERROR && stream->z.avail_in == avail_in && avail_in > 0 &&
                     stream->z.avail_out == part;
        if (r == Z_STREAM_END) {
            TL_TRY(next_member(stream));
        } else if (r == Z_MEM_ERROR) {
            return tl_error(TL_ERR_MEMORY, "read_idx: out of memory");
        } else if ((r != Z_OK && r != Z_BUF_ERROR) || stuck) {
            return tl_io_error(TL_ERR_ARGUMENT, "read_idx", stream->name,
                               "gzip data is corrupt: %s",
                               stream->z.msg ? stream->z.msg : "bad deflate data");
        }
    }
    *got = done;
    return TL_OK;
}

tl_status idx_stream_read(idx_stream *stream, void *buf, size_t n, size_t *got) {
    *got = 0;
    return stream->gzip ? read_gzip(stream, buf, n, got) : read_plain(stream, buf, n, got);
}

void idx_stream_close(idx_stream *stream) {
    if (stream->inflating) inflateEnd(&stream->z);
    free(stream->in);
    *stream = (idx_stream){0};
}
