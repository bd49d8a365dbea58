/* The safetensors dtypes tlua reads and writes, and the byte-level helpers its writer and loader
 * share (UTF-8, byte order). */
#include <string.h>

#include "safetensors_format.h"

/* The first entry for each tlua dtype is the one save writes. */
static const st_dtype st_dtypes[] = {
    {"F32", TL_F32, 4, ST_SAME},   {"F64", TL_F64, 8, ST_SAME}, {"BF16", TL_BF16, 2, ST_SAME},
    {"F16", TL_F16, 2, ST_SAME},   {"I32", TL_I32, 4, ST_SAME}, {"I64", TL_I64, 8, ST_SAME},
    {"BOOL", TL_BOOL, 1, ST_BOOL}, {"U8", TL_I32, 1, ST_U8},    {"I8", TL_I32, 1, ST_I8},
    {"U16", TL_I32, 2, ST_U16},    {"I16", TL_I32, 2, ST_I16},  {"U32", TL_I64, 4, ST_U32},
};

const st_dtype *st_dtype_by_name(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

const st_dtype *st_dtype_for(tl_dtype dtype) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype && st_dtypes[i].size == tl_dtype_size(dtype))
            return &st_dtypes[i];
    return NULL;
}

bool st_is_utf8(const char *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t extra;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            extra = 1, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3, cp = c & 0x07;
        } else {
            break;
        }
        if (extra > n - i - 1) break;
        size_t k = 1;
        for (; k <= extra && (p[i + k] & 0xC0) == 0x80; k++) cp = cp << 6 | (p[i + k] & 0x3F);
        if (k <= extra) break;
        if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            break;
        i += extra + 1;
    }
    if (bad) *bad = i;
    return i == n;
}

bool st_host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

void st_swap_bytes(void *data, size_t count, size_t width) {
    unsigned char *p = data;
    for (size_t i = 0; i < count; i++, p += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            unsigned char tmp = p[a];
            p[a] = p[b];
            p[b] = tmp;
        }
}
