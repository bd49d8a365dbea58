/* Internal to engine/io: where a loader's bytes come from (a regular file, opened so that a FIFO or
 * a device can never block it, or a memory buffer) and the loaders' shared error format. */
#ifndef TLUA_IO_SOURCE_H
#define TLUA_IO_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/error.h"

/* A file (fd >= 0) or a memory buffer (fd == -1); size is the file's size at
   open time or the buffer's length. */
typedef struct tl_io_source {
    int fd;
    const unsigned char *bytes;
    uint64_t size;
} tl_io_source;

/* Sets the message "op: 'name': <fmt ...>" and returns status. */
tl_status tl_io_error(tl_status status, const char *op, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Opens path for reading: refuses (naming path) anything but a regular file
   before opening it (a FIFO, a directory, a device, a socket), opens without
   blocking, and checks that what was opened is that same regular file.
   Errors read "op: 'path': ...". Close with tl_io_close. */
tl_status tl_io_open_file(const char *op, const char *path, tl_io_source *source);

/* A source over size bytes at bytes (not copied: they must outlive it). */
tl_io_source tl_io_memory(const void *bytes, size_t size);

/* Reads exactly n bytes at offset: 0, an errno value, or -1 when the source
   ends first (a file that shrank while being read, a buffer too short). */
int tl_io_read_at(const tl_io_source *source, void *buf, size_t n, uint64_t offset);

/* The text of a tl_io_read_at failure. */
const char *tl_io_read_error_text(int err);

/* Closes a file source; nothing for a memory source. */
void tl_io_close(tl_io_source *source);

#endif
