/* C unit test of engine/io: safetensors round trips, header layout, corrupt
   files, atomic writes, and IDX files (plain and gzip) read back. */
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlua/io.h"
#include "tlua/tlua.h"

#include "check.h"

/* ---- files ----------------------------------------------------------------- */

static char dir[64];

static const char *in_dir(const char *name) {
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

static void put(bytes *b, const void *data, size_t n) {
    if (b->size + n > b->capacity) {
        b->capacity = (b->size + n) * 2 + 64;
        b->data = realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    if (n) memcpy(b->data + b->size, data, n);
    b->size += n;
}
static void put_byte(bytes *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}
static void put_le(bytes *b, uint64_t v, int width) {
    for (int i = 0; i < width; i++) put_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}
static void put_be(bytes *b, uint64_t v, int width) {
    for (int i = width - 1; i >= 0; i--) put_byte(b, (unsigned)(v >> (8 * i)) & 0xFF);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        printf("cannot write %s\n", path);
        abort();
    }
}

static bytes read_whole(const char *path) {
    bytes b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    unsigned char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, n);
    fclose(f);
    return b;
}

static bool exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

/* Number of entries of directory d whose name contains needle. */
static int count_entries(const char *d, const char *needle) {
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
static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static bytes gzip_stored(const unsigned char *data, size_t n, size_t block) {
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
static void write_st(const char *path, const char *json, const void *data, size_t n) {
    bytes b = {0};
    put_le(&b, strlen(json), 8);
    put(&b, json, strlen(json));
    put(&b, data, n);
    write_file(path, b.data, b.size);
    free(b.data);
}

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

/* Files from another writer: any key order, whitespace, gaps, no padding,
   dtypes tlua widens. */
static void test_foreign_files(void) {
    const char *path = in_dir("foreign.safetensors");
    const char *json =
        "{\n  \"u8\": {\"data_offsets\": [0, 3], \"shape\": [3], \"dtype\": \"U8\"},"
        "\n  \"i8\": {\"dtype\": \"I8\", \"shape\": [3], \"data_offsets\": [3, 6]},"
        "\n  \"u16\": {\"dtype\": \"U16\", \"shape\": [2], \"data_offsets\": [6, 10]},"
        "\n  \"i16\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [10, 14]},"
        "\n  \"u32\": {\"dtype\": \"U32\", \"shape\": [1], \"data_offsets\": [14, 18]},"
        "\n  \"flag\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [20, 23]},"
        "\n  \"__metadata__\": {\"k\": \"v\"}, \"extra\": {\"dtype\": \"F32\", "
        "\"shape\": [], \"data_offsets\": [24, 28], \"ignored\": 1}\n}\n";
    const unsigned char data[28] = {0,    127,  255,        /* u8 */
                                    0x80, 0xFF, 0x7F,       /* i8 */
                                    0xFF, 0xFF, 0x01, 0x00, /* u16 */
                                    0x00, 0x80, 0xFF, 0x7F, /* i16 */
                                    0xFF, 0xFF, 0xFF, 0xFF, /* u32 */
                                    9,    9,                /* gap */
                                    2,    0,    1,          /* bool, 2 becomes true */
                                    9,                      /* gap */
                                    0x00, 0x00, 0xC0, 0x3F /* 1.5f */};
    write_st(path, json, data, sizeof data);
    tl_named_tensor *t = NULL;
    tl_metadata_entry *meta = NULL;
    int n = 0, mc = 0;
    OK(tl_load_safetensors(path, &t, &n, &meta, &mc));
    CHECK(n == 7 && mc == 1, "loaded %d tensors and %d metadata, expected 7 and 1", n, mc);
    const char *order[] = {"extra", "flag", "i16", "i8", "u16", "u32", "u8"};
    for (int i = 0; i < n && i < 7; i++)
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

/* ---- safetensors: bad files ------------------------------------------------------ */

/* Loading path fails with a message naming the file and holding needle, and
   leaves the outputs alone. */
static void expect_load_error(int line, const char *path, const char *needle) {
    static tl_named_tensor sentinel_tensors[1];
    static tl_metadata_entry sentinel_meta[1];
    tl_named_tensor *t = sentinel_tensors;
    tl_metadata_entry *m = sentinel_meta;
    int n = -7, mc = -7;
    tl_clear_error();
    tl_status status = tl_load_safetensors(path, &t, &n, &m, &mc);
    const char *message = tl_last_error();
    if (status == TL_OK) {
        failures++;
        printf("FAIL line %d: loading %s succeeded, expected an error with '%s'\n", line, path,
               needle);
        if (t != sentinel_tensors) tl_safetensors_free(t, n, m, mc);
        return;
    }
    if (t != sentinel_tensors || m != sentinel_meta || n != -7 || mc != -7) {
        failures++;
        printf("FAIL line %d: failed load of %s changed its outputs\n", line, path);
    }
    if (!strstr(message, path) || !strstr(message, needle) || strncmp(message, "load: ", 6)) {
        failures++;
        printf("FAIL line %d: message '%s' lacks 'load: ', the path or '%s'\n", line, message,
               needle);
    }
}

static void test_bad_files(void) {
    const char *path = in_dir("bad.safetensors");
    const unsigned char data[64] = {0};
    expect_load_error(__LINE__, in_dir("missing.safetensors"), "No such file");
    expect_load_error(__LINE__, dir, "not a regular file");

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

    write_st(path, "", data, 0);
    expect_load_error(__LINE__, path, "not valid JSON");
    write_st(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], ", data, 4);
    expect_load_error(__LINE__, path, "not valid JSON");
    write_st(path, "{\"a\": {\"dtype\": F32}}", data, 4);
    expect_load_error(__LINE__, path, "not valid JSON");
    write_st(path, "[1, 2]", data, 0);
    expect_load_error(__LINE__, path, "header is an array, expected a JSON object");
    write_st(path, "{}  x", data, 0);
    expect_load_error(__LINE__, path, "bytes other than spaces after its JSON object");
    b = (bytes){0};
    put_le(&b, 8, 8);
    put(&b, "{}\0\0\0\0\0\0", 8);
    write_file(path, b.data, b.size);
    free(b.data);
    expect_load_error(__LINE__, path, "bytes other than spaces");

    write_st(path, "{\"a\": 5}", data, 0);
    expect_load_error(__LINE__, path, "tensor 'a': expected an object");
    write_st(path, "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", data, 4);
    expect_load_error(__LINE__, path, "tensor 'a': expected a \"dtype\" string, got none");
    write_st(path, "{\"w\": {\"dtype\": \"F8_E4M3\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
             data, 4);
    expect_load_error(__LINE__, path, "tensor 'w' has dtype 'F8_E4M3'");
    write_st(path, "{\"w\": {\"dtype\": \"U64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", data,
             8);
    expect_load_error(__LINE__, path, "tensor 'w' has dtype 'U64'");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 16]}}", data,
             16);
    expect_load_error(__LINE__, path, "expected a \"shape\" array, got a number");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -2], \"data_offsets\": [0, 16]}}",
             data, 16);
    expect_load_error(__LINE__, path, "dim 2 of \"shape\" is not a non-negative integer");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}",
             data, 16);
    expect_load_error(__LINE__, path, "dim 1 of \"shape\"");
    write_st(path,
             "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1], "
             "\"data_offsets\": [0, 4]}}",
             data, 4);
    expect_load_error(__LINE__, path, "tensor 'w' has 17 dims, more than the 16");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
             data, 8);
    expect_load_error(__LINE__, path, "expected \"data_offsets\" [begin, end]");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", data,
             8);
    expect_load_error(__LINE__, path, "data_offsets [8, 4] end before they begin");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", data,
             12);
    expect_load_error(__LINE__, path, "data_offsets [0, 16] exceed the 12 bytes of data");
    write_st(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}",
             data, 24);
    expect_load_error(__LINE__, path, "6 elements of F32 need 24 bytes, but data_offsets [0, 20]");
    write_st(path,
             "{\"w\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296], \"data_offsets\": "
             "[0, 8]}}",
             data, 8);
    expect_load_error(__LINE__, path, "tensor 'w': its shape has too many elements");
    write_st(path,
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"b\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
             data, 12);
    expect_load_error(__LINE__, path, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    write_st(path,
             "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
             " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
             data, 8);
    expect_load_error(__LINE__, path, "header names two tensors 'a'");
    write_st(path, "{\"__metadata__\": {\"epoch\": 3}}", data, 0);
    expect_load_error(__LINE__, path, "metadata 'epoch' is a number, expected a string");
    write_st(path, "{\"__metadata__\": [\"x\"]}", data, 0);
    expect_load_error(__LINE__, path, "\"__metadata__\" is an array");
    write_st(path, "{\"__metadata__\": {}, \"__metadata__\": {}}", data, 0);
    expect_load_error(__LINE__, path, "two \"__metadata__\"");

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

/* ---- IDX ---------------------------------------------------------------------------- */

static bytes idx_file(unsigned type, const uint32_t *dims, int ndim, const void *be_data,
                      size_t n) {
    bytes b = {0};
    put_byte(&b, 0), put_byte(&b, 0), put_byte(&b, type), put_byte(&b, (unsigned)ndim);
    for (int d = 0; d < ndim; d++) put_be(&b, dims[d], 4);
    put(&b, be_data, n);
    return b;
}

static void expect_idx_error(int line, const char *path, const char *needle) {
    tl_tensor *sentinel = (tl_tensor *)&failures, *t = sentinel;
    tl_clear_error();
    tl_status status = tl_read_idx(path, &t);
    const char *message = tl_last_error();
    if (status == TL_OK) {
        failures++;
        printf("FAIL line %d: reading %s succeeded, expected an error with '%s'\n", line, path,
               needle);
        if (t != sentinel) tl_release(t);
        return;
    }
    if (t != sentinel) {
        failures++;
        printf("FAIL line %d: failed read of %s set its output\n", line, path);
    }
    if (!strstr(message, path) || !strstr(message, needle) || strncmp(message, "read_idx: ", 10)) {
        failures++;
        printf("FAIL line %d: message '%s' lacks 'read_idx: ', the path or '%s'\n", line, message,
               needle);
    }
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
    for (int p = 0; p < 2; p++) {
        tl_tensor *t = NULL;
        OK(tl_read_idx(paths[p], &t));
        if (!t) continue;
        CHECK(t->dtype == dtype && t->ndim == ndim, "%s: dtype %s, %d dims", paths[p],
              tl_dtype_name(t->dtype), t->ndim);
        int64_t numel = 1;
        for (int d = 0; d < ndim && d < t->ndim; d++) {
            CHECK(t->shape[d] == shape[d], "%s: dim %d is %lld", paths[p], d,
                  (long long)t->shape[d]);
            numel *= shape[d];
        }
        if (t->dtype == dtype && t->ndim == ndim)
            CHECK(memcmp(tl_data(t), want, (size_t)numel * tl_dtype_size(dtype)) == 0,
                  "%s: values differ", paths[p]);
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
    expect_idx_error(__LINE__, in_dir("missing.idx"), "cannot open: No such file");
    expect_idx_error(__LINE__, dir, "not a regular file");
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
    write_file(path, many.data, many.size);
    expect_idx_error(__LINE__, path, "gives 17 dims, expected 1 to 16");
    free(many.data);
    write_file(path, "\0\0\x08\0", 4);
    expect_idx_error(__LINE__, path, "gives 0 dims");
    write_file(path, "\0\0\x08\x03\0\0\0\2\0\0", 10);
    expect_idx_error(__LINE__, path, "file ends inside the dims: 3 dims need 12 bytes, found 6");
    f = idx_file(0x08, dims, 3, pixels, 11);
    write_file(path, f.data, f.size);
    expect_idx_error(__LINE__, path,
                     "dims [2, 2, 3] of unsigned byte need 12 bytes of data, the "
                     "file has 11 (truncated?)");
    free(f.data);
    f = idx_file(0x0C, &four, 1, ints, 16);
    put_byte(&f, 0);
    write_file(path, f.data, f.size);
    expect_idx_error(__LINE__, path, "need 16 bytes of data, the file has 17");
    free(f.data);
    uint32_t huge[4] = {60000, 60000, 60000, 60000};
    f = idx_file(0x08, huge, 3, pixels, 12);
    write_file(path, f.data, f.size);
    expect_idx_error(__LINE__, path, "need 216000000000000 bytes of data, the file has 12");
    free(f.data);
    f = idx_file(0x08, huge, 4, pixels, 12);
    write_file(path, f.data, f.size);
    expect_idx_error(__LINE__, path, "dims [60000, 60000, 60000, 60000] have too many elements");
    free(f.data);

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
    expect_idx_error(__LINE__, gz_path, "gzip data is corrupt");
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

/* ---- main ----------------------------------------------------------------------------- */

static void remove_all(const char *d) {
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

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tlua_test_io.XXXXXX", tmp && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    test_round_trip_dtypes();
    test_noncontiguous_and_empty();
    test_metadata_and_header();
    test_foreign_files();
    test_bad_files();
    test_save_errors_and_atomicity();
    test_idx();
    remove_all(dir);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_io: all checks passed\n");
    return 0;
}
