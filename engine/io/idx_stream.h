/* Internal to engine/io: the bytes of an IDX file read in order from a source, as they are (a
 * plain file) or inflated (gzip, one member or several). */
#ifndef TLUA_IDX_STREAM_H
#define TLUA_IDX_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "io_source.h"

typedef struct idx_stream {
    const tl_io_source *source;
    const char *name;  /* the file, for messages */
    uint64_t position; /* the next byte of the source to read */
    bool gzip;
    bool ended; /* gzip: the last member ended and nothing follows it */
    bool inflating;
    z_stream z;
    unsigned char *in;
    size_t in_capacity;
} idx_stream;

/* Starts reading source; it is gzip when it starts with the gzip magic
   (0x1F 0x8B). Errors read "read_idx: 'name': ...". */
tl_status idx_stream_open(idx_stream *stream, const tl_io_source *source, const char *name);

/* Reads up to n bytes; *got < n only at the end of the data. A gzip stream
   that is cut short or corrupt, or followed by bytes that are not gzip, is an
   error naming the file. */
tl_status idx_stream_read(idx_stream *stream, void *buf, size_t n, size_t *got);

void idx_stream_close(idx_stream *stream);

#endif
