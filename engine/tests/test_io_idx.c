/* C unit test of engine/io's IDX reader: every element type, plain and gzip files (several
   members too), from a file and from memory, and the errors: bad magic, sizes that overflow,
   truncated or trailing data, corrupt gzip, and paths that are not regular files. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/loaders.h"
#include "tlua/io.h"
#include "tlua/tlua.h"

#include "check.h"
#include "io_test_files.h"

static bytes idx_file(unsigned type, const uint32_t *dims, int ndim, const void *be_data,
                      size_t n) {
    bytes b = {0};
    put_byte(&b, 0), put_byte(&b, 0), put_byte(&b, type), put_byte(&b, (unsigned)ndim);
    for (int d = 0; d < ndim; d++) put_be(&b, dims[d], 4);
    put(&b, be_data, n);
    return b;
}

/* A failing read leaves its output alone and says "read_idx: '<name>': ...needle...". */
static void check_failure(int line, const char *how, tl_status status, tl_tensor *t,
                          const tl_tensor *sentinel, const char *name, const char *needle) {
    if (status == TL_OK) {
        failures++;
        printf("FAIL line %d: %s of %s succeeded, expected an error with '%s'\n", line, how, name,
               needle);
        if (t != sentinel) tl_release(t);
        return;
    }
    if (t != sentinel) {
        failures++;
        printf("FAIL line %d: failed %s of %s set its output\n", line, how, name);
    }
    check_io_message(line, how, "read_idx", name, needle);
}

/* Reading path fails naming it with needle; when it is a regular file, reading
   its bytes from memory fails with the same message (one code path). */
static void expect_idx_error(int line, const char *path, const char *needle) {
    tl_tensor *sentinel = (tl_tensor *)&failures, *t = sentinel;
    tl_clear_error();
    tl_status status = tl_read_idx(path, &t);
    char from_path[1024];
    snprintf(from_path, sizeof from_path, "%s", tl_last_error());
    check_failure(line, "read", status, t, sentinel, path, needle);
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISREG(info.st_mode)) return;
    bytes file = read_whole(path);
    t = sentinel;
    tl_clear_error();
    status = tl_read_idx_buffer(file.data, file.size, path, &t);
    check_failure(line, "read from memory", status, t, sentinel, path, needle);
    CHECK(strcmp(from_path, tl_last_error()) == 0,
          "line %d: the path and the memory readers disagree:\n  %s\n  %s", line, from_path,
          tl_last_error());
    free(file.data);
}

/* Writes the bytes to path (then frees them) and expects loading path to fail with needle. */
static void expect_idx_bytes_error(int line, const char *path, bytes b, const char *needle) {
    write_file(path, b.data, b.size);
    free(b.data);
    expect_idx_error(line, path, needle);
}

/* Reads path (plain) and path.gz (gzip) holding file and checks the result. */
static void check_idx(const char *name, bytes file, tl_dtype dtype, const int64_t *shape, int ndim,
                      const void *want) {
    char gz_name[128];
    snprintf(gz_name, sizeof gz_name, "%s.gz", name);
    write_file(in_dir(name), file.data, file.size);
    bytes gz = gzip_stored(file.data, file.size, 7);
    write_file(in_dir(gz_name), gz.data, gz.size);
    free(gz.data);
    const char *paths[2] = {in_dir(name), in_dir(gz_name)};
    for (int p = 0; p < 4; p++) { /* from the file, then from memory */
        tl_tensor *t = NULL;
        if (p < 2) {
            OK(tl_read_idx(paths[p], &t));
        } else {
            bytes whole = read_whole(paths[p - 2]);
            OK(tl_read_idx_buffer(whole.data, whole.size, paths[p - 2], &t));
            free(whole.data);
        }
        if (!t) continue;
        const char *what = paths[p % 2];
        CHECK(t->dtype == dtype && t->ndim == ndim, "%s: dtype %s, %d dims", what,
              tl_dtype_name(t->dtype), t->ndim);
        int64_t numel = 1;
        for (int d = 0; d < ndim && d < t->ndim; d++) {
            CHECK(t->shape[d] == shape[d], "%s: dim %d is %lld", what, d, (long long)t->shape[d]);
            numel *= shape[d];
        }
        if (t->dtype == dtype && t->ndim == ndim)
            CHECK(memcmp(tl_data(t), want, (size_t)numel * tl_dtype_size(dtype)) == 0,
                  "%s: values differ", what);
        tl_release(t);
    }
}

static void test_idx(void) {
    /* unsigned bytes: images [2, 2, 3] */
    uint32_t dims[3] = {2, 2, 3};
    unsigned char pixels[12] = {0, 1, 2, 127, 128, 255, 7, 8, 9, 10, 11, 12};
    int32_t pixels_i32[12];
    for (int i = 0; i < 12; i++) pixels_i32[i] = pixels[i];
    int64_t s223[] = {2, 2, 3};
    bytes f = idx_file(0x08, dims, 3, pixels, 12);
    check_idx("images.idx", f, TL_I32, s223, 3, pixels_i32);
    free(f.data);

    /* labels: 1-D, many gzip blocks, more than one 1 MiB read chunk */
    enum { N = 1100000 };
    unsigned char *labels = malloc(N);
    int32_t *labels_i32 = malloc(N * sizeof *labels_i32);
    for (int i = 0; i < N; i++) labels[i] = (unsigned char)(i * 7 % 10), labels_i32[i] = labels[i];
    uint32_t n = N;
    int64_t sn[] = {N};
    f = idx_file(0x08, &n, 1, labels, N);
    check_idx("labels.idx", f, TL_I32, sn, 1, labels_i32);
    free(f.data), free(labels), free(labels_i32);

    /* signed bytes, int16, int32, float32, float64 */
    uint32_t four = 4;
    int64_t s4[] = {4};
    const unsigned char sbytes[4] = {0x80, 0xFF, 0x00, 0x7F};
    const int32_t sbytes_want[4] = {-128, -1, 0, 127};
    f = idx_file(0x09, &four, 1, sbytes, 4);
    check_idx("sbyte.idx", f, TL_I32, s4, 1, sbytes_want);
    free(f.data);
    const unsigned char shorts[8] = {0x80, 0x00, 0xFF, 0xFF, 0x01, 0x02, 0x7F, 0xFF};
    const int32_t shorts_want[4] = {-32768, -1, 258, 32767};
    f = idx_file(0x0B, &four, 1, shorts, 8);
    check_idx("short.idx", f, TL_I32, s4, 1, shorts_want);
    free(f.data);
    const unsigned char ints[16] = {0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFE,
                                    0,    0, 1, 2, 0x7F, 0xFF, 0xFF, 0xFF};
    const int32_t ints_want[4] = {INT32_MIN, -2, 258, INT32_MAX};
    f = idx_file(0x0C, &four, 1, ints, 16);
    check_idx("int.idx", f, TL_I32, s4, 1, ints_want);
    free(f.data);
    const float floats_want[4] = {1.5f, -2.0f, INFINITY, 1e-45f};
    bytes be = {0};
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        memcpy(&u, &floats_want[i], 4);
        put_be(&be, u, 4);
    }
    uint32_t d22[2] = {2, 2};
    int64_t s22[] = {2, 2};
    f = idx_file(0x0D, d22, 2, be.data, be.size);
    check_idx("float.idx", f, TL_F32, s22, 2, floats_want);
    free(f.data), free(be.data);
    const double doubles_want[4] = {1.0 / 3, -0.0, 5e-324, 1e300};
    be = (bytes){0};
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        memcpy(&u, &doubles_want[i], 8);
        put_be(&be, u, 8);
    }
    f = idx_file(0x0E, &four, 1, be.data, be.size);
    check_idx("double.idx", f, TL_F64, s4, 1, doubles_want);
    free(f.data), free(be.data);
    /* empty */
    uint32_t zero_dims[2] = {0, 28};
    int64_t s0[] = {0, 28};
    f = idx_file(0x08, zero_dims, 2, NULL, 0);
    check_idx("empty.idx", f, TL_I32, s0, 2, pixels_i32);
    free(f.data);

    /* errors */
    const char *path = in_dir("bad.idx");
    write_file(path, "", 0);
    expect_idx_error(__LINE__, path, "file has 0 bytes, too few for the 4-byte IDX magic");
    write_file(path, "\x12\x34\x08\x01\0\0\0\1x", 9);
    expect_idx_error(__LINE__, path, "bad magic number 0x12340801");
    write_file(path, "\0\0\x0A\x01\0\0\0\1x", 9);
    expect_idx_error(__LINE__, path, "unknown element type 0x0A");
    bytes many = {0};
    put_be(&many, 0x00000811, 4);
    for (int d = 0; d < 17; d++) put_be(&many, 1, 4);
    put_byte(&many, 1);
    expect_idx_bytes_error(__LINE__, path, many, "gives 17 dims, expected 1 to 16");
    write_file(path, "\0\0\x08\0", 4);
    expect_idx_error(__LINE__, path, "gives 0 dims");
    write_file(path, "\0\0\x08\x03\0\0\0\2\0\0", 10);
    expect_idx_error(__LINE__, path, "file ends inside the dims: 3 dims need 12 bytes, found 6");
    f = idx_file(0x08, dims, 3, pixels, 11);
    expect_idx_bytes_error(__LINE__, path, f,
                           "dims [2, 2, 3] of unsigned byte need 12 bytes of data, the "
                           "file has 11 (truncated?)");
    f = idx_file(0x0C, &four, 1, ints, 16);
    put_byte(&f, 0);
    expect_idx_bytes_error(__LINE__, path, f, "need 16 bytes of data, the file has 17");
    uint32_t huge[4] = {60000, 60000, 60000, 60000};
    f = idx_file(0x08, huge, 3, pixels, 12);
    expect_idx_bytes_error(__LINE__, path, f,
                           "need 216000000000000 bytes of data, the file has 12");
    f = idx_file(0x08, huge, 4, pixels, 12);
    expect_idx_bytes_error(
        __LINE__, path, f,
        "shape [60000, 60000, 60000, 60000] has too many elements (at most 2^62, zero "
        "sizes counted as 1)");

    /* gzip: cut short, trailing data, a damaged checksum, an absurd size */
    f = idx_file(0x08, dims, 3, pixels, 12);
    bytes gz = gzip_stored(f.data, f.size, 7);
    const char *gz_path = in_dir("bad.idx.gz");
    write_file(gz_path, gz.data, gz.size - 12);
    expect_idx_error(__LINE__, gz_path, "truncated");
    write_file(gz_path, gz.data, gz.size - 3);
    expect_idx_error(__LINE__, gz_path, "truncated");
    gz.data[gz.size - 8] ^= 0x55; /* CRC */
    write_file(gz_path, gz.data, gz.size);
    expect_idx_error(__LINE__, gz_path, "gzip data is corrupt: incorrect data check");
    free(gz.data);
    put_byte(&f, 42);
    gz = gzip_stored(f.data, f.size, 7);
    write_file(gz_path, gz.data, gz.size);
    expect_idx_error(__LINE__, gz_path, "more data than dims [2, 2, 3] of unsigned byte need");
    free(gz.data), free(f.data);
    f = idx_file(0x0E, huge, 2, pixels, 12);
    gz = gzip_stored(f.data, f.size, 7);
    write_file(gz_path, gz.data, gz.size);
    expect_idx_error(__LINE__, gz_path, "more than a gzip file of");
    free(gz.data), free(f.data);
}

/* dims whose product or byte count overflows: errors before anything is allocated */
static void test_idx_huge_dims(void) {
    const char *path = in_dir("huge.idx");
    unsigned char data[16] = {0};
    struct {
        unsigned type;
        uint32_t dims[4];
        int ndim;
        const char *needle;
    } cases[] = {
        {0x08, {65536, 65536, 65536, 65536}, 4, "shape [65536, 65536, 65536, 65536] has too many"},
        {0x08,
         {0, 4294967295u, 4294967295u, 4294967295u},
         4,
         "shape [0, 4294967295, 4294967295, 4294967295] has too many elements"},
        {0x08, {4294967295u, 4294967295u, 4}, 3, "shape [4294967295, 4294967295, 4] has too many"},
        /* 2^62 elements fit, 2^65 bytes of float64 do not */
        {0x0E,
         {2147483648u, 2147483648u},
         2,
         "dims [2147483648, 2147483648] of float64 need more than 2^62 bytes of data"},
        {0x0B,
         {2147483648u, 2147483647u},
         2,
         "dims [2147483648, 2147483647] of int16 need more than 2^62 bytes of data"},
        /* fits, but not in this file */
        {0x0C,
         {65536, 65536, 1024},
         3,
         "dims [65536, 65536, 1024] of int32 need 17592186044416 bytes of data, the file has 16 "
         "(truncated?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bytes f = idx_file(cases[i].type, cases[i].dims, cases[i].ndim, data, sizeof data);
        write_file(path, f.data, f.size);
        free(f.data);
        expect_idx_error(__LINE__, path, cases[i].needle);
    }
}

/* gzip of several members reads as one stream; bytes after the gzip data are refused */
static void test_idx_gzip_members(void) {
    uint32_t dims[2] = {3, 4};
    unsigned char v[12];
    int32_t want[12];
    for (int i = 0; i < 12; i++) v[i] = (unsigned char)(200 + i), want[i] = v[i];
    bytes f = idx_file(0x08, dims, 2, v, 12);
    bytes first = gzip_stored(f.data, 10, 4), second = gzip_stored(f.data + 10, f.size - 10, 100);
    put(&first, second.data, second.size);
    const char *path = in_dir("members.idx.gz");
    write_file(path, first.data, first.size);
    tl_tensor *t = NULL;
    OK(tl_read_idx(path, &t));
    if (t)
        CHECK(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 &&
                  memcmp(tl_data(t), want, sizeof want) == 0,
              "two gzip members read wrong");
    tl_release(t);
    put(&first, "\0\0\0", 3);
    write_file(path, first.data, first.size);
    expect_idx_error(__LINE__, path, "3 bytes after the end of the gzip data are not gzip");
    free(first.data), free(second.data), free(f.data);
}

static void test_idx_not_regular_files(void) {
    alarm(20); /* a reader that blocks on the FIFO fails the test instead of hanging it */
    expect_idx_error(__LINE__, in_dir("missing.idx"), "cannot open: No such file or directory");
    expect_idx_error(__LINE__, dir, "is a directory, not a regular file");
    const char *fifo = in_dir("pipe.idx");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s failed", fifo);
    expect_idx_error(__LINE__, fifo, "is a FIFO (named pipe), not a regular file");
    expect_idx_error(__LINE__, "/dev/zero", "is a character device, not a regular file");
    unlink(fifo);
    alarm(0);
}

int main(void) {
    if (!make_test_dir("tlua_test_io_idx")) return 1;
    test_idx();
    test_idx_huge_dims();
    test_idx_gzip_members();
    test_idx_not_regular_files();
    remove_all(dir);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_io_idx: all checks passed\n");
    return 0;
}
