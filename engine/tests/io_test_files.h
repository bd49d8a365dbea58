/* The C tests of engine/io share these: a temporary directory, byte buffers and files made by
   hand (safetensors, gzip), independent of the code under test. */
#ifndef TLUA_TEST_IO_FILES_H
#define TLUA_TEST_IO_FILES_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tlua/error.h"

static char dir[64];

static inline const char *in_dir(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

typedef struct bytes {
    unsigned char *data;
    size_t size, capacity;
} bytes;

static inline void put(bytes *b, const void *data, size_t n) {
    if (b->size + n > b->capacity) {
        b->capacity = (b->size + n) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    if (n) memcpy(b->data + b->size, data, n);
    b->size += n;
}
static inline void put_byte(bytes *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}
static inline void put_le(bytes *b, uint64_t v, int width) {
    for (int i = 0; i < width; i++) put_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}
static inline void put_be(bytes *b, uint64_t v, int width) {
    for (int i = width - 1; i >= 0; i--) put_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}

static inline void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        printf("cannot write %s\n", path);
        abort();
    }
}

static inline bytes read_whole(const char *path) {
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    unsigned char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, n);
    fclose(f);
    return b;
}

static inline bool exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

/* Number of entries of directory d whose name contains needle. */
static inline int count_entries(const char *d, const char *needle) {
    DIR *handle = opendir(d);
    int n = 0;
    if (!handle) return -1;
    for (struct dirent *e; (e = readdir(handle));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, needle)) n++;
    closedir(handle);
    return n;
}

/* A gzip file made by hand (stored deflate blocks of at most `block` bytes),
   independent of the zlib the reader uses. */
static inline uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static inline bytes gzip_stored(const unsigned char *data, size_t n, size_t block) {
    bytes g = {0};
    const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    put(&g, head, sizeof head);
    size_t done = 0;
    do {
        size_t part = n - done < block ? n - done : block;
        put_byte(&g, done + part == n); /* BFINAL, BTYPE 00 (stored) */
        put_le(&g, part, 2);
        put_le(&g, ~part & 0xFFFF, 2);
        put(&g, data + done, part);
        done += part;
    } while (done < n);
    put_le(&g, crc32_of(data, n), 4);
    put_le(&g, n & 0xFFFFFFFFu, 4);
    return g;
}

/* A safetensors file with the given header text and data. */
static inline void write_st(const char *path, const char *json, const void *data, size_t n) {
    bytes b = {0};
    put_le(&b, strlen(json), 8);
    put(&b, json, strlen(json));
    put(&b, data, n);
    write_file(path, b.data, b.size);
    free(b.data);
}

static inline void remove_all(const char *d) {
    DIR *handle = opendir(d);
    if (!handle) return;
    for (struct dirent *e; (e = readdir(handle));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", d, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(handle);
    rmdir(d);
}

/* Makes the temporary directory `dir` (under $TMPDIR or /tmp); false when it cannot. */
static inline bool make_test_dir(const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/%s.XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp", prefix);
    if (mkdtemp(dir)) return true;
    printf("cannot create a temporary directory\n");
    return false;
}

/* The last error is "op: '<name>': ..." and holds needle; a failure is counted otherwise. */
static inline void check_io_message(int line, const char *how, const char *op, const char *name,
                                    const char *needle) {
    const char *message = tl_last_error();
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s: '%s': ", op, name);
    if (strncmp(message, prefix, strlen(prefix)) != 0 || !strstr(message, needle)) {
        failures++;
        printf("FAIL line %d: %s: message '%s' lacks \"%s\" or '%s'\n", line, how, message, prefix,
               needle);
    }
}

#endif
