/* The loaders' byte sources: regular files opened without blocking and checked, memory buffers. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_source.h"

#define IO_CHUNK ((size_t)1 << 30) /* bytes per pread() call */

tl_status tl_io_error(tl_status status, const char *op, const char *name, const char *fmt, ...) {
    char message[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    return tl_error(status, "%s: '%s': %s", op, name, message);
}

/* What kind of file mode is, for "is a FIFO (named pipe), not a regular file". */
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

tl_status tl_io_open_file(const char *op, const char *path, tl_io_source *source) {
    struct stat before, opened;
    if (stat(path, &before) != 0)
        return tl_io_error(TL_ERR_RUNTIME, op, path, "cannot open: %s", strerror(errno));
    if (!S_ISREG(before.st_mode))
        return tl_io_error(TL_ERR_ARGUMENT, op, path, "is %s, not a regular file",
                           file_kind(before.st_mode));
    /* O_NONBLOCK: should path turn into a FIFO between stat and open, the open
       still returns at once (a regular file ignores the flag) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return tl_io_error(TL_ERR_RUNTIME, op, path, "cannot open: %s", strerror(errno));
    if (fstat(fd, &opened) != 0) {
        tl_status status =
            tl_io_error(TL_ERR_RUNTIME, op, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return status;
    }
    if (!S_ISREG(opened.st_mode) || opened.st_dev != before.st_dev ||
        opened.st_ino != before.st_ino) {
        close(fd);
        return tl_io_error(
            TL_ERR_RUNTIME, op, path, "the file was replaced while being opened (now %s)",
            S_ISREG(opened.st_mode) ? "another regular file" : file_kind(opened.st_mode));
    }
    source->fd = fd;
    source->bytes = NULL;
    source->size = opened.st_size > 0 ? (uint64_t)opened.st_size : 0;
    return TL_OK;
}

tl_io_source tl_io_memory(const void *bytes, size_t size) {
    return (tl_io_source){.fd = -1, .bytes = bytes, .size = bytes ? (uint64_t)size : 0};
}

int tl_io_read_at(const tl_io_source *source, void *buf, size_t n, uint64_t offset) {
    if (source->fd < 0) {
        if (offset > source->size || n > source->size - offset) return -1;
        if (n) memcpy(buf, source->bytes + offset, n);
        return 0;
    }
    unsigned char *p = buf;
    while (n > 0) {
        size_t want = n < IO_CHUNK ? n : IO_CHUNK;
        if (offset > (uint64_t)INT64_MAX - want) return -1;
        ssize_t got = pread(source->fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (got == 0) return -1;
        p += got, n -= (size_t)got, offset += (uint64_t)got;
    }
    return 0;
}

const char *tl_io_read_error_text(int err) {
    return err < 0 ? "the file ended early (was it changed while being read?)" : strerror(err);
}

void tl_io_close(tl_io_source *source) {
    if (source->fd >= 0) close(source->fd);
    source->fd = -1;
}
