/* libFuzzer harness: any bytes as an IDX file (plain or gzip), read from memory. A failure must be
   a message naming the file; a success must agree with an independent decoding of the bytes
   (gzip members inflated here with zlib's raw API): dtype, dims, exact size, every value. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "io/loaders.h"
#include "tlua/tlua.h"

#define NAME "fuzz.idx"

__attribute__((noreturn)) static void broken(const char *what) {
    fprintf(stderr, "fuzz_idx: invariant broken: %s\n", what);
    abort();
}

/* Inflates all gzip members of bytes into *out (at most cap bytes); false when
   the reader should not have accepted them. */
static bool gunzip(const uint8_t *bytes, size_t size, uint8_t **out, size_t *out_size, size_t cap) {
    z_stream z = {0};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) broken("zlib init failed");
    uint8_t *buf = malloc(cap + 1);
    if (!buf) broken("out of memory");
    z.next_in = (Bytef *)bytes;
    z.avail_in = (uInt)size;
    z.next_out = buf;
    z.avail_out = (uInt)(cap + 1);
    bool ok = true;
    for (;;) {
        int r = inflate(&z, Z_NO_FLUSH);
        if (r == Z_STREAM_END) {
            if (z.avail_in == 0) break;
            inflateReset(&z);
            continue;
        }
        if (r != Z_OK || z.avail_out == 0) {
            ok = false;
            break;
        }
    }
    *out_size = cap + 1 - z.avail_out;
    inflateEnd(&z);
    *out = buf;
    return ok && *out_size <= cap;
}

static uint64_t be(const uint8_t *p, size_t width) {
    uint64_t v = 0;
    for (size_t b = 0; b < width; b++) v = v << 8 | p[b];
    return v;
}

/* The plain IDX bytes against the tensor read from them. */
static void check_plain(const uint8_t *p, size_t size, const tl_tensor *t) {
    if (size < 4 || p[0] != 0 || p[1] != 0) broken("a bad magic number was read");
    size_t width;
    tl_dtype dtype;
    switch (p[2]) {
    case 0x08:
    case 0x09:
        width = 1, dtype = TL_I32;
        break;
    case 0x0B:
        width = 2, dtype = TL_I32;
        break;
    case 0x0C:
        width = 4, dtype = TL_I32;
        break;
    case 0x0D:
        width = 4, dtype = TL_F32;
        break;
    case 0x0E:
        width = 8, dtype = TL_F64;
        break;
    default:
        broken("an unknown type was read");
    }
    int ndim = p[3];
    if (t->dtype != dtype || t->ndim != ndim) broken("dtype or ndim differ from the magic's");
    if (size < 4 + 4 * (size_t)ndim) broken("dims beyond the file were read");
    __int128 numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (t->shape[d] != (int64_t)be(p + 4 + 4 * d, 4)) broken("a dim differs from the file's");
        numel *= t->shape[d];
    }
    size_t header = 4 + 4 * (size_t)ndim;
    if ((__int128)(size - header) != numel * (__int128)width)
        broken("the data size differs from dims * element size");
    if (!tl_is_contiguous(t) || tl_numel(t) != numel) broken("tensor layout wrong");
    const uint8_t *data = p + header;
    for (int64_t i = 0; i < (int64_t)numel; i++) {
        uint64_t u = be(data + (size_t)i * width, width);
        bool same;
        if (dtype == TL_I32) {
            int32_t want = p[2] == 0x08   ? (int32_t)u
                           : p[2] == 0x09 ? (int8_t)u
                           : p[2] == 0x0B ? (int16_t)u
                                          : (int32_t)(uint32_t)u;
            same = ((const int32_t *)tl_data(t))[i] == want;
        } else if (dtype == TL_F32) {
            uint32_t bits = (uint32_t)u;
            same = memcmp((const float *)tl_data(t) + i, &bits, 4) == 0;
        } else {
            same = memcmp((const double *)tl_data(t) + i, &u, 8) == 0;
        }
        if (!same) broken("a value differs from the file's");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t size) {
    tl_tensor *sentinel = (tl_tensor *)&sentinel, *t = sentinel;
    if (tl_read_idx_buffer(bytes, size, NAME, &t) != TL_OK) {
        const char *message = tl_last_error();
        if (strncmp(message, "read_idx: '" NAME "': ", strlen("read_idx: '" NAME "': ")) != 0 &&
            strncmp(message, "read_idx: out of memory", 23) != 0)
            broken(message);
        if (t != sentinel) broken("a failed read set its output");
        return 0;
    }
    if (size >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B) {
        uint8_t *plain = NULL;
        size_t plain_size = 0;
        size_t cap = 4 + 4 * 255 + (size_t)tl_numel(t) * 8;
        if (!gunzip(bytes, size, &plain, &plain_size, cap))
            broken("gzip data zlib refuses was read");
        check_plain(plain, plain_size, t);
        free(plain);
    } else {
        check_plain(bytes, size, t);
    }
    tl_release(t);
    return 0;
}
