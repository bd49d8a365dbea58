/* C unit test of engine/io's safetensors writer: round trips of every dtype, views, metadata, the
   exact header layout, files of other writers, save errors and atomic writes. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/io.h"
#include "tlua/tlua.h"

#include "check.h"
#include "io_test_files.h"

/* ---- safetensors: round trips ------------------------------------------------ */

static tl_tensor *from_host(const void *data, const int64_t *shape, int ndim, tl_dtype dtype) {
    tl_tensor *t = NULL;
    OK(tl_from_host(data, shape, ndim, dtype, TL_CPU, &t));
    return t;
}

static const tl_named_tensor *find(const tl_named_tensor *list, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(list[i].name, name) == 0) return &list[i];
    return NULL;
}

/* Same dtype, shape and bytes. */
static void check_same(const char *what, const tl_tensor *got, const tl_tensor *want) {
    CHECK(got != NULL, "%s: missing", what);
    if (!got) return;
    CHECK(got->dtype == want->dtype, "%s: dtype %s, expected %s", what, tl_dtype_name(got->dtype),
          tl_dtype_name(want->dtype));
    CHECK(got->ndim == want->ndim, "%s: %d dims, expected %d", what, got->ndim, want->ndim);
    if (got->dtype != want->dtype || got->ndim != want->ndim) return;
    for (int d = 0; d < got->ndim; d++)
        CHECK(got->shape[d] == want->shape[d], "%s: dim %d is %lld, expected %lld", what, d,
              (long long)got->shape[d], (long long)want->shape[d]);
    size_t n = (size_t)tl_numel(want) * tl_dtype_size(want->dtype);
    void *a = malloc(n + 1), *b = malloc(n + 1);
    OK(tl_to_host(got, a));
    OK(tl_to_host(want, b));
    CHECK(memcmp(a, b, n) == 0, "%s: bytes differ", what);
    free(a), free(b);
}

static void test_round_trip_dtypes(void) {
    const float f32[] = {1.5f, -0.0f, INFINITY, -INFINITY, 1e-45f, 3.4028235e38f};
    uint32_t nan32 = 0x7FC12345u; /* NaN with a payload */
    float f32n[7];
    memcpy(f32n, f32, sizeof f32);
    memcpy(&f32n[6], &nan32, 4);
    const double f64[] = {1.0 / 3, -0.0, 5e-324, -1.7976931348623157e308};
    const uint16_t bf16[] = {0x3F80, 0x8000, 0x7F80, 0x7FC1, 0x0001, 0xFF7F};
    const uint16_t f16[] = {0x3C00, 0x8000, 0x7C00, 0x7E01, 0x0001, 0xFBFF, 0x3555, 0x0400};
    const int32_t i32[] = {INT32_MIN, -1, 0, 1, INT32_MAX, 123456};
    const int64_t i64[] = {INT64_MIN, -1, 0, INT64_MAX, (int64_t)1 << 53 | 1};
    const bool b[] = {true, false, false, true, true};
    int64_t s23[] = {2, 3}, s7[] = {7}, s4[] = {4, 1}, s32[] = {3, 1, 2}, s6[] = {6},
            s222[] = {2, 2, 2}, s5[] = {5}, s15[] = {1, 5};
    tl_named_tensor list[] = {
        {"z.f32", from_host(f32n, s7, 1, TL_F32)},  {"weights.f64", from_host(f64, s4, 2, TL_F64)},
        {"bf16", from_host(bf16, s23, 2, TL_BF16)}, {"half", from_host(f16, s222, 3, TL_F16)},
        {"ints", from_host(i32, s32, 3, TL_I32)},   {"A.long", from_host(i64, s5, 1, TL_I64)},
        {"mask", from_host(b, s15, 2, TL_BOOL)},    {"ints6", from_host(i32, s6, 1, TL_I32)},
    };
    int count = (int)(sizeof list / sizeof list[0]);
    const char *path = in_dir("dtypes.safetensors");
    OK(tl_save_safetensors(path, list, count, NULL, 0));

    tl_named_tensor *loaded = NULL;
    int n = -1, mc = -1;
    tl_metadata_entry *meta = NULL;
    OK(tl_load_safetensors(path, &loaded, &n, &meta, &mc));
    CHECK(n == count, "loaded %d tensors, expected %d", n, count);
    CHECK(mc == 0, "loaded %d metadata entries, expected 0", mc);
    for (int i = 1; i < n; i++)
        CHECK(strcmp(loaded[i - 1].name, loaded[i].name) < 0, "not sorted by name: '%s', '%s'",
              loaded[i - 1].name, loaded[i].name);
    for (int i = 0; i < count; i++) {
        const tl_named_tensor *got = find(loaded, n, list[i].name);
        check_same(list[i].name, got ? got->tensor : NULL, list[i].tensor);
    }
    tl_safetensors_free(loaded, n, meta, mc);
    /* metadata not wanted */
    OK(tl_load_safetensors(path, &loaded, &n, NULL, NULL));
    tl_safetensors_free(loaded, n, NULL, 0);
    for (int i = 0; i < count; i++) tl_release(list[i].tensor);
}

static void test_noncontiguous_and_empty(void) {
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)i + 0.25f;
    int64_t s34[] = {3, 4}, s13[] = {1, 3}, s23[] = {2, 3}, s0[] = {0}, s203[] = {2, 0, 3};
    tl_tensor *base = from_host(v, s34, 2, TL_F32), *transposed = NULL, *narrowed = NULL,
              *expanded = NULL, *column = NULL;
    OK(tl_transpose(base, 0, 1, &transposed)); /* [4, 3], strides (1, 4) */
    OK(tl_narrow(base, 0, 1, 2, &narrowed));   /* rows 1..2: contiguous, offset 4 */
    tl_tensor *short_row = from_host(v, s13, 2, TL_F32);
    OK(tl_expand(short_row, s23, 2, &expanded)); /* stride 0 */
    OK(tl_narrow(base, 1, 2, 1, &column));       /* [3, 1], offset 2 */
    double pi = 3.14159;
    tl_tensor *scalar = from_host(&pi, NULL, 0, TL_F64);
    tl_tensor *empty = from_host(v, s0, 1, TL_I64), *empty3 = from_host(v, s203, 3, TL_BF16);
    tl_named_tensor list[] = {{"t", transposed}, {"n", narrowed},  {"e", expanded},   {"c", column},
                              {"s", scalar},     {"empty", empty}, {"empty3", empty3}};
    int count = (int)(sizeof list / sizeof list[0]);
    const char *path = in_dir("views.safetensors");
    OK(tl_save_safetensors(path, list, count, NULL, 0));
    tl_named_tensor *loaded = NULL;
    int n = 0;
    OK(tl_load_safetensors(path, &loaded, &n, NULL, NULL));
    CHECK(n == count, "loaded %d tensors, expected %d", n, count);
    for (int i = 0; i < count; i++) {
        const tl_named_tensor *got = find(loaded, n, list[i].name);
        check_same(list[i].name, got ? got->tensor : NULL, list[i].tensor);
        if (got)
            CHECK(tl_is_contiguous(got->tensor), "%s: loaded tensor not contiguous", got->name);
    }
    /* the values themselves, not only the copy path */
    const tl_named_tensor *t = find(loaded, n, "t");
    if (t) {
        const float *f = tl_data(t->tensor);
        CHECK(f[0] == 0.25f && f[1] == 4.25f && f[2] == 8.25f && f[3] == 1.25f,
              "transposed values wrong: %g %g %g %g", f[0], f[1], f[2], f[3]);
    }
    const tl_named_tensor *c = find(loaded, n, "c");
    if (c) {
        const float *f = tl_data(c->tensor);
        CHECK(f[0] == 2.25f && f[1] == 6.25f && f[2] == 10.25f, "column values wrong");
    }
    const tl_named_tensor *s = find(loaded, n, "s");
    if (s) CHECK(s->tensor->ndim == 0 && *(double *)tl_data(s->tensor) == pi, "0-dim tensor wrong");
    tl_safetensors_free(loaded, n, NULL, 0);

    /* the header says shape [] for the 0-dim tensor and [0, 0] offsets for empty ones */
    bytes file = read_whole(path);
    char *text = calloc(1, file.size + 1);
    memcpy(text, file.data, file.size);
    CHECK(strstr(text + 8, "\"s\":{\"dtype\":\"F64\",\"shape\":[],") != NULL,
          "0-dim shape not [] in header");
    CHECK(strstr(text + 8, "\"empty3\":{\"dtype\":\"BF16\",\"shape\":[2,0,3],\"data_offsets\":[") !=
              NULL,
          "empty tensor header wrong");
    free(text), free(file.data);

    /* nothing at all */
    OK(tl_save_safetensors(in_dir("nothing.safetensors"), NULL, 0, NULL, 0));
    loaded = NULL, n = -1;
    OK(tl_load_safetensors(in_dir("nothing.safetensors"), &loaded, &n, NULL, NULL));
    CHECK(n == 0 && loaded != NULL, "empty checkpoint: %d tensors", n);
    tl_safetensors_free(loaded, n, NULL, 0);
    for (int i = 0; i < count; i++) tl_release(list[i].tensor);
    tl_release(base), tl_release(short_row);
}

static void test_metadata_and_header(void) {
    int64_t s2[] = {2}, s12[] = {1, 2};
    float f[] = {1.0f, 2.0f};
    int64_t l[] = {-1, 258};
    tl_named_tensor list[] = {{"b", from_host(f, s2, 1, TL_F32)},
                              {"a", from_host(l, s12, 2, TL_I64)}};
    tl_metadata_entry meta[] = {{"format", "pt"},
                                {"epoch", "12"},
                                {"note", "quote \" backslash \\ newline \n tab \t h\xC3\xA9llo"},
                                {"", "empty key"}};
    const char *path = in_dir("meta.safetensors");
    OK(tl_save_safetensors(path, list, 2, meta, 4));

    /* the exact bytes: length, JSON (sorted names and keys; wider dtypes first in
       the data), space padding to 8, then the data little-endian */
    bytes file = read_whole(path);
    const char *want =
        "{\"__metadata__\":{\"\":\"empty key\",\"epoch\":\"12\",\"format\":\"pt\",\"note\":\"quote "
        "\\\" backslash \\\\ newline \\n tab \\t h\xC3\xA9llo\"},"
        "\"a\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
    uint64_t n = 0;
    for (int i = 7; i >= 0 && file.size >= 8; i--) n = n << 8 | file.data[i];
    size_t want_length = strlen(want), padded = (want_length + 7) / 8 * 8;
    CHECK(n == padded, "header length %llu, expected %zu", (unsigned long long)n, padded);
    CHECK(n % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)n);
    CHECK(file.size == 8 + padded + 24, "file size %zu, expected %zu", file.size, 8 + padded + 24);
    if (file.size == 8 + padded + 24) {
        CHECK(memcmp(file.data + 8, want, want_length) == 0, "header differs:\n%.*s\nexpected\n%s",
              (int)want_length, (const char *)file.data + 8, want);
        for (size_t i = want_length; i < padded; i++)
            CHECK(file.data[8 + i] == ' ', "padding byte %zu is 0x%02X, not a space", i,
                  file.data[8 + i]);
        const unsigned char *data = file.data + 8 + padded;
        const unsigned char want_data[24] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                             0x02, 0x01, 0,    0,    0,    0,    0,    0,
                                             0,    0,    0x80, 0x3F, 0,    0,    0,    0x40};
        CHECK(memcmp(data, want_data, 24) == 0, "data bytes differ");
    }
    free(file.data);

    tl_named_tensor *loaded = NULL;
    tl_metadata_entry *got = NULL;
    int count = 0, mc = 0;
    OK(tl_load_safetensors(path, &loaded, &count, &got, &mc));
    CHECK(mc == 4, "loaded %d metadata entries, expected 4", mc);
    const char *keys[] = {"", "epoch", "format", "note"};
    const char *values[] = {"empty key", "12", "pt", meta[2].value};
    for (int i = 0; i < mc && i < 4; i++) {
        CHECK(strcmp(got[i].key, keys[i]) == 0, "metadata key %d is '%s', expected '%s'", i,
              got[i].key, keys[i]);
        CHECK(strcmp(got[i].value, values[i]) == 0, "metadata '%s' is '%s', expected '%s'",
              got[i].key, got[i].value, values[i]);
    }
    tl_safetensors_free(loaded, count, got, mc);
    tl_release(list[0].tensor), tl_release(list[1].tensor);
}

/* Files from another writer: any key order, whitespace, no padding, offsets
   in an order other than the names', an empty tensor between two others, dtypes
   tlua widens. */
static void test_foreign_files(void) {
    const char *path = in_dir("foreign.safetensors");
    const char *json =
        "{\n  \"u8\": {\"data_offsets\": [0, 3], \"shape\": [3], \"dtype\": \"U8\"},"
        "\n  \"i8\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [3, 6]},"
        "\n  \"u16\": {\"dtype\": \"U16\", \"shape\": [2], \"data_offsets\": [6, 10]},"
        "\n  \"i16\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [10, 14]},"
        "\n  \"u32\": {\"dtype\": \"U32\", \"shape\": [1], \"data_offsets\": [14, 18]},"
        "\n  \"none\": {\"dtype\": \"F64\", \"shape\": [0, 5], \"data_offsets\": [18, 18]},"
        "\n  \"flag\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [18, 21]},"
        "\n  \"__metadata__\": {\"k\": \"v\"}, \"extra\": {\"dtype\": \"F32\", "
        "\"shape\": [], \"data_offsets\": [21, 25], \"ignored\": 1}\n}\n";
    const unsigned char data[25] = {0,    127,  255,        /* u8 */
                                    0x80, 0xFF, 0x7F,       /* i8 */
                                    0xFF, 0xFF, 0x01, 0x00, /* u16 */
                                    0x00, 0x80, 0xFF, 0x7F, /* i16 */
                                    0xFF, 0xFF, 0xFF, 0xFF, /* u32 */
                                    2,    0,    1,          /* bool, 2 becomes true */
                                    0x00, 0x00, 0xC0, 0x3F /* 1.5f, unaligned */};
    write_st(path, json, data, sizeof data);
    tl_named_tensor *t = NULL;
    tl_metadata_entry *meta = NULL;
    int n = 0, mc = 0;
    OK(tl_load_safetensors(path, &t, &n, &meta, &mc));
    CHECK(n == 8 && mc == 1, "loaded %d tensors and %d metadata, expected 8 and 1", n, mc);
    const char *order[] = {"extra", "flag", "i16", "i8", "none", "u16", "u32", "u8"};
    for (int i = 0; i < n && i < 8; i++)
        CHECK(strcmp(t[i].name, order[i]) == 0, "tensor %d is '%s', expected '%s'", i, t[i].name,
              order[i]);
    const tl_named_tensor *e;
    if ((e = find(t, n, "u8"))) {
        const int32_t *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_I32 && v[0] == 0 && v[1] == 127 && v[2] == 255, "U8 wrong");
    }
    if ((e = find(t, n, "i8"))) {
        const int32_t *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_I32 && v[0] == -128 && v[1] == -1 && v[2] == 127, "I8 wrong");
    }
    if ((e = find(t, n, "u16"))) {
        const int32_t *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_I32 && v[0] == 65535 && v[1] == 1, "U16 wrong");
    }
    if ((e = find(t, n, "i16"))) {
        const int32_t *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_I32 && v[0] == -32768 && v[1] == 32767, "I16 wrong");
    }
    if ((e = find(t, n, "u32"))) {
        const int64_t *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_I64 && v[0] == 4294967295LL, "U32 wrong");
    }
    if ((e = find(t, n, "flag"))) {
        const unsigned char *v = tl_data(e->tensor);
        CHECK(e->tensor->dtype == TL_BOOL && v[0] == 1 && v[1] == 0 && v[2] == 1, "BOOL wrong");
    }
    if ((e = find(t, n, "none")))
        CHECK(e->tensor->dtype == TL_F64 && e->tensor->ndim == 2 && e->tensor->shape[0] == 0 &&
                  e->tensor->shape[1] == 5,
              "empty F64 [0, 5] wrong");
    if ((e = find(t, n, "extra"))) {
        CHECK(e->tensor->ndim == 0 && *(float *)tl_data(e->tensor) == 1.5f, "0-dim F32 wrong");
    }
    tl_safetensors_free(t, n, meta, mc);

    /* widening in several chunks: 700000 U16 values (1.4 MB) */
    enum { N = 700000 };
    unsigned char *wide = malloc(2 * N);
    for (int i = 0; i < N; i++)
        wide[2 * i] = (unsigned char)(i * 7), wide[2 * i + 1] = (unsigned char)(i >> 3);
    write_st(
        path,
        "{\"big\": {\"dtype\": \"U16\", \"shape\": [700, 1000], \"data_offsets\": [0, 1400000]}}",
        wide, 2 * N);
    OK(tl_load_safetensors(path, &t, &n, NULL, NULL));
    if (n == 1) {
        const int32_t *v = tl_data(t[0].tensor);
        int wrong = 0;
        for (int i = 0; i < N; i++) wrong += v[i] != (wide[2 * i] | wide[2 * i + 1] << 8);
        CHECK(wrong == 0, "%d of %d widened U16 values wrong", wrong, N);
    }
    tl_safetensors_free(t, n, NULL, 0);
    free(wide);
}

/* ---- safetensors: writing ----------------------------------------------------------- */

static void expect_save_error(int line, const char *path, const tl_named_tensor *list, int n,
                              const tl_metadata_entry *meta, int mc, const char *needle) {
    tl_clear_error();
    tl_status status = tl_save_safetensors(path, list, n, meta, mc);
    const char *message = tl_last_error();
    if (status == TL_OK) {
        failures++;
        printf("FAIL line %d: saving %s succeeded, expected an error with '%s'\n", line, path,
               needle);
        return;
    }
    if (!strstr(message, path) || !strstr(message, needle) || strncmp(message, "save: ", 6)) {
        failures++;
        printf("FAIL line %d: message '%s' lacks 'save: ', the path or '%s'\n", line, message,
               needle);
    }
}

static void test_save_errors_and_atomicity(void) {
    int64_t shape[] = {3};
    float a[] = {1, 2, 3}, b[] = {4, 5, 6};
    tl_tensor *ta = from_host(a, shape, 1, TL_F32), *tb = from_host(b, shape, 1, TL_F32);
    const char *path = in_dir("model.safetensors");

    /* argument errors write nothing */
    tl_named_tensor twice[] = {{"w", ta}, {"w", tb}};
    expect_save_error(__LINE__, path, twice, 2, NULL, 0, "two tensors are named 'w'");
    tl_named_tensor reserved[] = {{"__metadata__", ta}};
    expect_save_error(__LINE__, path, reserved, 1, NULL, 0, "'__metadata__' is reserved");
    tl_named_tensor null_tensor[] = {{"w", NULL}};
    expect_save_error(__LINE__, path, null_tensor, 1, NULL, 0, "tensor 'w' is NULL");
    tl_named_tensor null_name[] = {{"w", ta}, {NULL, tb}};
    expect_save_error(__LINE__, path, null_name, 2, NULL, 0, "tensor 2 has no name");
    tl_named_tensor bad_utf8[] = {{"w\xC3(", ta}};
    expect_save_error(__LINE__, path, bad_utf8, 1, NULL, 0, "is not valid UTF-8");
    tl_named_tensor one[] = {{"w", ta}};
    tl_metadata_entry meta_twice[] = {{"k", "1"}, {"k", "2"}};
    expect_save_error(__LINE__, path, one, 1, meta_twice, 2, "two metadata entries have key 'k'");
    tl_metadata_entry meta_null[] = {{"k", NULL}};
    expect_save_error(__LINE__, path, one, 1, meta_null, 1, "metadata 'k' has no value");
    expect_save_error(__LINE__, path, NULL, 2, NULL, 0, "expected 2 tensors, got none");
    CHECK(!exists(path), "a failed save created %s", path);
    CHECK(count_entries(dir, ".tmp.") == 0, "a failed save left a temporary file");

    /* into a directory that does not exist */
    const char *nowhere = in_dir("no/such/dir/model.safetensors");
    expect_save_error(__LINE__, nowhere, one, 1, NULL, 0, "cannot create temporary file");
    CHECK(!exists(nowhere), "save into a missing directory created a file");

    /* onto a directory: the rename fails, the temporary file goes away */
    const char *taken = in_dir("taken.safetensors");
    mkdir(taken, 0700);
    expect_save_error(__LINE__, taken, one, 1, NULL, 0, "cannot rename");
    CHECK(count_entries(dir, ".tmp.") == 0, "a failed rename left a temporary file");
    rmdir(taken);

    /* a read-only directory (meaningless as root, who may write anywhere) */
    if (geteuid() != 0) {
        const char *locked = in_dir("locked");
        mkdir(locked, 0500);
        char inside[600];
        snprintf(inside, sizeof inside, "%s/model.safetensors", locked);
        expect_save_error(__LINE__, inside, one, 1, NULL, 0, "cannot create temporary file");
        CHECK(count_entries(locked, "") == 0, "save into a read-only directory left a file");
        rmdir(locked);
    }

    /* overwriting replaces the whole file and leaves no temporary behind */
    tl_named_tensor first[] = {{"a", ta}, {"b", tb}};
    OK(tl_save_safetensors(path, first, 2, NULL, 0));
    tl_named_tensor second[] = {{"w", tb}};
    tl_metadata_entry meta[] = {{"version", "2"}};
    OK(tl_save_safetensors(path, second, 1, meta, 1));
    CHECK(count_entries(dir, ".tmp.") == 0, "save left a temporary file");
    tl_named_tensor *loaded = NULL;
    tl_metadata_entry *got = NULL;
    int n = 0, mc = 0;
    OK(tl_load_safetensors(path, &loaded, &n, &got, &mc));
    CHECK(n == 1 && strcmp(loaded[0].name, "w") == 0, "overwritten file holds %d tensors", n);
    CHECK(mc == 1 && strcmp(got[0].value, "2") == 0, "overwritten file has the old metadata");
    if (n == 1) check_same("w", loaded[0].tensor, tb);
    tl_safetensors_free(loaded, n, got, mc);
    /* a failed save leaves the old file as it was */
    bytes before = read_whole(path);
    expect_save_error(__LINE__, path, twice, 2, NULL, 0, "two tensors");
    bytes after = read_whole(path);
    CHECK(before.size == after.size && memcmp(before.data, after.data, before.size) == 0,
          "a failed save changed the existing file");
    free(before.data), free(after.data);

    /* a tensor that cannot be copied halfway through the data (a storage
       marked as living on a GPU, where no GPU could take that seriously): the
       old file stays as it was and no temporary file remains */
    if (tl_cuda_device_count() == 0) {
        before = read_whole(path);
        tl_named_tensor midway[] = {{"a", ta}, {"b", tb}};
        tb->storage->device = (tl_device){.type = TL_DEVICE_CUDA, .index = 0};
        expect_save_error(__LINE__, path, midway, 2, NULL, 0, "cannot copy tensor 'b'");
        tb->storage->device = TL_CPU;
        after = read_whole(path);
        CHECK(before.size == after.size && memcmp(before.data, after.data, before.size) == 0,
              "a save that failed while writing changed the existing file");
        CHECK(count_entries(dir, ".tmp.") == 0,
              "a save that failed while writing left a temporary file");
        free(before.data), free(after.data);
    }
    tl_release(ta), tl_release(tb);
}

/* ---- main ----------------------------------------------------------------------------- */

int main(void) {
    if (!make_test_dir("tlua_test_io")) return 1;
    test_round_trip_dtypes();
    test_noncontiguous_and_empty();
    test_metadata_and_header();
    test_foreign_files();
    test_save_errors_and_atomicity();
    remove_all(dir);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_io: all checks passed\n");
    return 0;
}
