/* C unit test of engine/io's safetensors loader: the validation of the reference implementation
   (header length, JSON text, dtypes, shapes, offsets that tile the data exactly), sizes that
   overflow, bool bytes, non-regular files, and the memory entry giving what the path gives. */
#include <signal.h>
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

/* ---- expecting errors ----------------------------------------------------------------- */

/* A failing load leaves its outputs alone and says "load: '<name>': ...needle...". */
static void check_failure(int line, const char *how, tl_status status, const char *name,
                          const char *needle, tl_named_tensor *t, int n, tl_metadata_entry *m,
                          int mc, const void *sentinel_t, const void *sentinel_m) {
    if (status == TL_OK) {
        failures++;
        printf("FAIL line %d: %s of %s succeeded, expected an error with '%s'\n", line, how, name,
               needle);
        if ((const void *)t != sentinel_t) tl_safetensors_free(t, n, m, mc);
        return;
    }
    if ((const void *)t != sentinel_t || (const void *)m != sentinel_m || n != -7 || mc != -7) {
        failures++;
        printf("FAIL line %d: failed %s of %s changed its outputs\n", line, how, name);
    }
    check_io_message(line, how, "load", name, needle);
}

/* Loading path fails with a message naming the file and holding needle; when
   it is a regular file, loading its bytes from memory fails with the same
   message (one code path). */
static void expect_load_error(int line, const char *path, const char *needle) {
    static tl_named_tensor sentinel_tensors[1];
    static tl_metadata_entry sentinel_meta[1];
    tl_named_tensor *t = sentinel_tensors;
    tl_metadata_entry *m = sentinel_meta;
    int n = -7, mc = -7;
    tl_clear_error();
    tl_status status = tl_load_safetensors(path, &t, &n, &m, &mc);
    char from_path[1024];
    snprintf(from_path, sizeof from_path, "%s", tl_last_error());
    check_failure(line, "load", status, path, needle, t, n, m, mc, sentinel_tensors, sentinel_meta);
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISREG(info.st_mode)) return;
    bytes file = read_whole(path);
    tl_clear_error();
    status = tl_load_safetensors_buffer(file.data, file.size, path, &t, &n, &m, &mc);
    check_failure(line, "load from memory", status, path, needle, t, n, m, mc, sentinel_tensors,
                  sentinel_meta);
    CHECK(strcmp(from_path, tl_last_error()) == 0,
          "line %d: the path and the memory loaders disagree:\n  %s\n  %s", line, from_path,
          tl_last_error());
    free(file.data);
}

/* ---- the header ------------------------------------------------------------------------ */

static tl_tensor *from_host(const void *data, const int64_t *shape, int ndim, tl_dtype dtype) {
    tl_tensor *t = NULL;
    OK(tl_from_host(data, shape, ndim, dtype, TL_CPU, &t));
    return t;
}

/* A header and the bytes of data after it, and what loading it must say. */
typedef struct header_case {
    const char *header;
    size_t data_size;
    const char *needle;
} header_case;

static const header_case header_cases[] = {
    {"", 0, "header is empty (length 0), expected a JSON object"},
    {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], ", 4, "not valid JSON"},
    {"{\"a\": {\"dtype\": F32}}", 4, "not valid JSON"},
    {"[1, 2]", 0, "header starts with byte 0x5B ('['), expected '{'"},
    {" {}", 0, "header starts with byte 0x20, expected '{'"},
    {"{\"w\xC3(\": {}}", 0, "header is not valid UTF-8 (byte 3 of 11)"},
    {"{\"w\x01\": {}}", 0, "header holds control character 0x01 at byte 3 of 10"},
    {"{}  x", 0, "bytes other than spaces after its JSON object"},
    {"{\"a\": 5}", 0, "tensor 'a': expected an object"},
    {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'a': expected a \"dtype\" string, got none"},
    {"{\"w\": {\"dtype\": \"F8_E4M3\", \"shape\": [4], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'w' has dtype 'F8_E4M3'"},
    {"{\"w\": {\"dtype\": \"U64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8,
     "tensor 'w' has dtype 'U64'"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", 16,
     "expected a \"shape\" array, got a number"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -2], \"data_offsets\": [0, 16]}}", 16,
     "dim 2 of \"shape\" is not a non-negative integer"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}", 16,
     "dim 1 of \"shape\""},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "
     "\"data_offsets\": [0, 4]}}",
     4, "tensor 'w' has 17 dims, more than the 16"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8,
     "expected \"data_offsets\" [begin, end]"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
     "data_offsets [8, 4] end before they begin"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 12,
     "data_offsets [0, 16] exceed the 12 bytes of data"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24,
     "tensor 'w': shape [2, 3] of F32 needs 24 bytes, but data_offsets [0, 20] "
     "hold 20"},
    {"{\"w\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296], \"data_offsets\": "
     "[0, 8]}}",
     8, "tensor 'w': shape [4294967296, 4294967296] has too many elements"},
    {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     12, "tensors 'a' [0, 8] and 'b' [4, 12] overlap in the data"},
    {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
     " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
     8, "header names two tensors 'a'"},
    {"{\"__metadata__\": {\"epoch\": 3}}", 0, "metadata 'epoch' is a number, expected a string"},
    {"{\"__metadata__\": [\"x\"]}", 0, "\"__metadata__\" is an array"},
    {"{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "two \"__metadata__\""},
};

/* Writes cases first .. first + count - 1 of header_cases to path and checks each load fails. */
static void run_header_cases(const char *path, const void *data, int first, int count) {
    for (int i = first; i < first + count; i++) {
        write_st(path, header_cases[i].header, data, header_cases[i].data_size);
        int before = failures;
        expect_load_error(__LINE__, path, header_cases[i].needle);
        if (failures > before) printf("  (header case %d: %s)\n", i, header_cases[i].header);
    }
}

static void test_bad_files(void) {
    const char *path = in_dir("bad.safetensors");
    const unsigned char data[64] = {0};

    write_file(path, "\x05\0\0", 3);
    expect_load_error(__LINE__, path, "file has 3 bytes, too few");

    bytes b = {0};
    put_le(&b, 1234, 8);
    put(&b, "{}", 2);
    write_file(path, b.data, b.size);
    expect_load_error(__LINE__, path, "header length 1234 exceeds the 2 bytes");
    b.size = 0;
    put_le(&b, UINT64_MAX, 8);
    write_file(path, b.data, b.size);
    expect_load_error(__LINE__, path, "header length 18446744073709551615 exceeds");
    free(b.data);

    run_header_cases(path, data, 0, 8);
    b = (bytes){0};
    put_le(&b, 8, 8);
    put(&b, "{}\0\0\0\0\0\0", 8);
    write_file(path, b.data, b.size);
    free(b.data);
    expect_load_error(__LINE__, path, "header holds control character 0x00 at byte 2 of 8");

    run_header_cases(path, data, 8, 18);

    /* a good file cut short anywhere fails; cut inside the data it names the
       data size */
    int64_t shape[] = {4, 4};
    double v[16] = {1};
    tl_tensor *t = from_host(v, shape, 2, TL_F64);
    tl_named_tensor list[] = {{"w", t}};
    const char *good = in_dir("good.safetensors");
    OK(tl_save_safetensors(good, list, 1, NULL, 0));
    tl_release(t);
    bytes whole = read_whole(good);
    uint64_t length = 0;
    for (int i = 7; i >= 0; i--) length = length << 8 | whole.data[i];
    for (size_t cut = 0; cut < whole.size; cut += cut < 16 ? 1 : 13) {
        write_file(path, whole.data, cut);
        expect_load_error(__LINE__, path,
                          cut < 8            ? "too few"
                          : cut < 8 + length ? "header length"
                                             : "exceed");
    }
    free(whole.data);
}

/* ---- the tiling of the data buffer ------------------------------------------------------ */

static void test_tiling(void) {
    const char *path = in_dir("tiling.safetensors");
    const unsigned char data[64] = {0};
    /* a hole before the first tensor, between two, and bytes after the last */
    write_st(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", data,
             8);
    expect_load_error(__LINE__, path,
                      "the data begins with a hole of 4 bytes: its first tensor 'a' [4, 8] should "
                      "begin at 0 (the tensors must tile the data)");
    write_st(path,
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"b\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [12, 16]}}",
             data, 16);
    expect_load_error(__LINE__, path,
                      "a hole of 4 bytes between tensors 'a' [0, 8] and 'b' [12, 16] (the tensors "
                      "must tile the data)");
    write_st(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", data,
             12);
    expect_load_error(
        __LINE__, path,
        "4 trailing bytes: the tensors end at byte 8 of the data, which has 12 bytes");
    write_st(path, "{}", data, 1);
    expect_load_error(__LINE__, path,
                      "1 trailing bytes: the tensors end at byte 0 of the data, which has 1 bytes");
    write_st(path, "{\"__metadata__\": {\"k\": \"v\"}}", data, 3);
    expect_load_error(__LINE__, path, "3 trailing bytes");
    /* overlaps: listed in another order than the offsets; an empty tensor inside another */
    write_st(path,
             "{\"z\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"a\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}",
             data, 8);
    expect_load_error(__LINE__, path, "tensors 'a' [0, 8] and 'z' [0, 8] overlap in the data");
    write_st(path,
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]}}",
             data, 8);
    expect_load_error(__LINE__, path, "tensors 'a' [0, 8] and 'e' [4, 4] overlap in the data");

    /* what tiles loads: empty tensors at the start, in between and at the end, any order */
    write_st(path,
             "{\"c\": {\"dtype\": \"BOOL\", \"shape\": [0, 3], \"data_offsets\": [6, 6]},"
             " \"b\": {\"dtype\": \"I16\", \"shape\": [1], \"data_offsets\": [4, 6]},"
             " \"e\": {\"dtype\": \"F64\", \"shape\": [0], \"data_offsets\": [0, 0]},"
             " \"m\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
             " \"a\": {\"dtype\": \"U8\", \"shape\": [2, 2], \"data_offsets\": [0, 4]}}",
             "\x01\x02\x03\x04\xFF\x7F", 6);
    tl_named_tensor *t = NULL;
    int n = 0;
    OK(tl_load_safetensors(path, &t, &n, NULL, NULL));
    CHECK(n == 5, "loaded %d tensors, expected 5", n);
    if (n == 5) {
        const int32_t *a = tl_data(t[0].tensor), *b = tl_data(t[1].tensor);
        CHECK(a[0] == 1 && a[1] == 2 && a[2] == 3 && a[3] == 4, "U8 [2, 2] wrong");
        CHECK(b[0] == 32767, "I16 wrong: %d", b[0]);
        CHECK(tl_numel(t[2].tensor) == 0 && t[2].tensor->dtype == TL_BOOL, "empty bool wrong");
    }
    tl_safetensors_free(t, n, NULL, 0);
}

/* ---- sizes that overflow ---------------------------------------------------------------- */

static void test_huge_shapes(void) {
    const char *path = in_dir("huge.safetensors");
    const unsigned char data[16] = {0};
    struct {
        const char *shape, *needle;
    } cases[] = {
        /* a zero size does not excuse the others: the strides would overflow */
        {"[0, 4503599627370496, 4503599627370496, 4503599627370496]",
         "tensor 'w': shape [0, 4503599627370496, 4503599627370496, 4503599627370496] has too "
         "many elements (at most 2^62, zero sizes counted as 1)"},
        {"[3037000500, 3037000500]", "shape [3037000500, 3037000500] has too many elements"},
        {"[65536, 65536, 65536, 65536]", "shape [65536, 65536, 65536, 65536] has too many"},
        {"[2147483648, 2147483648, 2]", "shape [2147483648, 2147483648, 2] has too many"},
        {"[4294967295, 4294967295, 4294967295, 0]", "has too many elements"},
        /* 2^62 elements of 4 bytes: the count fits, the bytes do not */
        {"[2147483648, 2147483648]",
         "tensor 'w': shape [2147483648, 2147483648] of F32 needs more than 2^62 bytes"},
        {"[0, 1152921504606846976]",
         "tensor 'w': dim 2 of \"shape\" is 1.152921504606847e+18, at least 2^53"},
        {"[1e400]", "tensor 'w': dim 1 of \"shape\" is inf, at least 2^53"},
        {"[9007199254740993]", "dim 1 of \"shape\" is 9007199254740992, at least 2^53"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"w\": {\"dtype\": \"F32\", \"shape\": %s, \"data_offsets\": [0, 16]}}",
                 cases[i].shape);
        write_st(path, json, data, 16);
        expect_load_error(__LINE__, path, cases[i].needle);
    }
    /* 2^62 bools: counted exactly, then compared with the offsets */
    write_st(path,
             "{\"w\": {\"dtype\": \"BOOL\", \"shape\": [2147483648, 2147483648], "
             "\"data_offsets\": [0, 16]}}",
             data, 16);
    expect_load_error(
        __LINE__, path,
        "tensor 'w': shape [2147483648, 2147483648] of BOOL needs 4611686018427387904 "
        "bytes, but data_offsets [0, 16] hold 16");
    /* offsets beyond 2^53 (inexact as JSON numbers) and beyond the data */
    write_st(path,
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": "
             "[18446744073709551600, 18446744073709551616]}}",
             data, 16);
    expect_load_error(__LINE__, path, "expected \"data_offsets\" [begin, end] of two non-negative");
    write_st(path,
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": "
             "[9007199254740000, 9007199254740016]}}",
             data, 16);
    expect_load_error(__LINE__, path,
                      "data_offsets [9007199254740000, 9007199254740016] exceed the 16 bytes");
}

/* ---- bool bytes --------------------------------------------------------------------------- */

static void test_bool_bytes(void) {
    const char *path = in_dir("bool.safetensors");
    write_st(path, "{\"m\": {\"dtype\": \"BOOL\", \"shape\": [2, 3], \"data_offsets\": [0, 6]}}",
             "\x00\x07\x01\xFF\x00\x80", 6);
    const unsigned char want[6] = {0, 1, 1, 1, 0, 1};
    for (int from_memory = 0; from_memory < 2; from_memory++) {
        tl_named_tensor *t = NULL;
        int n = 0;
        bytes file = read_whole(path);
        if (from_memory)
            OK(tl_load_safetensors_buffer(file.data, file.size, path, &t, &n, NULL, NULL));
        else
            OK(tl_load_safetensors(path, &t, &n, NULL, NULL));
        free(file.data);
        CHECK(n == 1, "loaded %d tensors", n);
        if (n != 1) continue;
        const unsigned char *got = tl_data(t[0].tensor);
        CHECK(memcmp(got, want, 6) == 0, "bool bytes %u %u %u %u %u %u, expected 0 1 1 1 0 1",
              got[0], got[1], got[2], got[3], got[4], got[5]);
        tl_tensor *sum = NULL; /* sums the bytes as C bool: 7 read as a bool is undefined */
        OK(tl_sum_all(t[0].tensor, &sum));
        if (sum)
            CHECK(sum->dtype == TL_I64 && *(const int64_t *)tl_data(sum) == 4,
                  "sum of the bools is %lld, not 4", (long long)*(const int64_t *)tl_data(sum));
        tl_release(sum);
        tl_safetensors_free(t, n, NULL, 0);
    }
}

/* ---- what is not a regular file ---------------------------------------------------------- */

static void test_not_regular_files(void) {
    alarm(20); /* a loader that blocks on the FIFO fails the test instead of hanging it */
    expect_load_error(__LINE__, in_dir("missing.safetensors"),
                      "cannot open: No such file or directory");
    expect_load_error(__LINE__, dir, "is a directory, not a regular file");
    const char *fifo = in_dir("pipe.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s failed", fifo);
    expect_load_error(__LINE__, fifo, "is a FIFO (named pipe), not a regular file");
    expect_load_error(__LINE__, "/dev/null", "is a character device, not a regular file");
    unlink(fifo);
    alarm(0);
    /* a symbolic link to a regular file is that file */
    int64_t shape[] = {2};
    float v[] = {1.5f, -2.0f};
    tl_tensor *w = NULL;
    OK(tl_from_host(v, shape, 1, TL_F32, TL_CPU, &w));
    tl_named_tensor list[] = {{"w", w}};
    OK(tl_save_safetensors(in_dir("real.safetensors"), list, 1, NULL, 0));
    tl_release(w);
    CHECK(symlink("real.safetensors", in_dir("link.safetensors")) == 0, "symlink failed");
    tl_named_tensor *t = NULL;
    int n = 0;
    OK(tl_load_safetensors(in_dir("link.safetensors"), &t, &n, NULL, NULL));
    CHECK(n == 1 && ((const float *)tl_data(t[0].tensor))[1] == -2.0f, "link loaded wrong");
    tl_safetensors_free(t, n, NULL, 0);
}

/* ---- memory and path agree --------------------------------------------------------------- */

static void test_memory_entry(void) {
    int64_t shape[] = {2, 3};
    double v[6] = {1, -2, 3.5, 1e300, -0.0, 6};
    tl_tensor *a = NULL, *b = NULL;
    OK(tl_from_host(v, shape, 2, TL_F64, TL_CPU, &a));
    OK(tl_from_host(v, shape, 1, TL_F32, TL_CPU, &b));
    tl_named_tensor list[] = {{"a", a}, {"b", b}};
    tl_metadata_entry meta[] = {{"k", "v"}};
    const char *path = in_dir("memory.safetensors");
    OK(tl_save_safetensors(path, list, 2, meta, 1));
    bytes file = read_whole(path);
    tl_named_tensor *t = NULL;
    tl_metadata_entry *m = NULL;
    int n = 0, mc = 0;
    OK(tl_load_safetensors_buffer(file.data, file.size, "mem", &t, &n, &m, &mc));
    CHECK(n == 2 && mc == 1, "from memory: %d tensors, %d metadata", n, mc);
    if (n == 2) {
        CHECK(memcmp(tl_data(t[0].tensor), v, sizeof v) == 0, "'a' from memory differs");
        CHECK(t[1].tensor->dtype == TL_F32 && tl_numel(t[1].tensor) == 2, "'b' from memory wrong");
    }
    if (mc == 1) CHECK(strcmp(m[0].value, "v") == 0, "metadata from memory wrong");
    tl_safetensors_free(t, n, m, mc);
    /* every cut of the file fails, from memory as from the file */
    for (size_t cut = 0; cut < file.size; cut += 5) {
        write_file(in_dir("cut.safetensors"), file.data, cut);
        expect_load_error(__LINE__, in_dir("cut.safetensors"), "");
    }
    free(file.data);
    tl_release(a), tl_release(b);
}

int main(void) {
    if (!make_test_dir("tlua_test_io_safetensors")) return 1;
    test_bad_files();
    test_tiling();
    test_huge_shapes();
    test_bool_bytes();
    test_not_regular_files();
    test_memory_entry();
    remove_all(dir);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_io_safetensors: all checks passed\n");
    return 0;
}
