/* The safetensors header: parsing its JSON and validating it by the reference implementation's
 * rules (dtypes, shapes, offsets that tile the data buffer exactly, metadata) before anything is
 * allocated for the tensors. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_source.h"
#include "safetensors_format.h"
#include "core/size.h"

#define ST_JSON_INT_LIMIT 9007199254740992.0 /* 2^53: from here on a JSON number is inexact */

static int compare_entry_names(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

/* By data_offsets: begin, then end (empty tensors before the one that starts there). */
static int compare_entry_offsets(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int compare_json_keys(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static const char *json_kind(const cJSON *item) {
    if (!item) return "none";
    if (cJSON_IsObject(item)) return "an object";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsBool(item)) return "a boolean";
    return "null";
}

typedef enum json_int { JSON_INT_OK, JSON_INT_BAD, JSON_INT_HUGE } json_int;

/* A JSON number that is an exact integer in [0, 2^53) (JSON_INT_HUGE: an integer from 2^53 on). */
static json_int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return JSON_INT_BAD;
    double d = item->valuedouble;
    if (!(d >= 0) || d != floor(d)) return JSON_INT_BAD; /* NaN, negative, a fraction */
    if (d >= ST_JSON_INT_LIMIT) return JSON_INT_HUGE;
    *out = (uint64_t)d;
    return JSON_INT_OK;
}

static void shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* The shape of a tensor entry and its element count. */
static tl_status parse_shape(const char *file, const char *name, const cJSON *shape, st_entry *e) {
    if (!cJSON_IsArray(shape))
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': expected a \"shape\" array, got %s", name,
                           json_kind(shape));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > TL_MAX_DIMS)
        return tl_io_error(TL_ERR_SHAPE, "load", file,
                           "tensor '%s' has %d dims, more than the %d tlua supports", name, ndim,
                           TL_MAX_DIMS);
    int d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t size = 0;
        json_int kind = json_uint(dim, &size);
        if (kind == JSON_INT_HUGE)
            return tl_io_error(TL_ERR_SHAPE, "load", file,
                               "tensor '%s': dim %d of \"shape\" is %.17g, at least 2^53: too "
                               "many elements",
                               name, d + 1, dim->valuedouble);
        if (kind != JSON_INT_OK)
            return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                               "tensor '%s': dim %d of \"shape\" is not a non-negative integer",
                               name, d + 1);
        e->shape[d] = (int64_t)size;
    }
    e->ndim = ndim;
    char op[1024];
    snprintf(op, sizeof op, "load: '%s': tensor '%s'", file, name);
    return tl_shape_numel(op, e->shape, ndim, &e->numel);
}

/* Reads one tensor's description and checks it against the data buffer's size. */
static tl_status parse_entry(const char *file, const cJSON *item, uint64_t data_size, st_entry *e) {
    const char *name = item->string;
    e->name = name;
    if (!cJSON_IsObject(item))
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': expected an object with dtype, shape and data_offsets, "
                           "got %s",
                           name, json_kind(item));
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dtype))
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': expected a \"dtype\" string, got %s", name,
                           json_kind(dtype));
    e->dtype = st_dtype_by_name(dtype->valuestring);
    if (!e->dtype)
        return tl_io_error(
            TL_ERR_DTYPE, "load", file,
            "tensor '%s' has dtype '%s', which tlua cannot load (it loads " ST_SUPPORTED ")", name,
            dtype->valuestring);
    TL_TRY(parse_shape(file, name, cJSON_GetObjectItemCaseSensitive(item, "shape"), e));

    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    uint64_t range[2];
    int n = 0;
    if (cJSON_IsArray(offsets) && cJSON_GetArraySize(offsets) == 2)
        for (const cJSON *v = offsets->child; v && json_uint(v, &range[n]) == JSON_INT_OK;
             v = v->next)
            n++;
    if (n != 2)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': expected \"data_offsets\" [begin, end] of two "
                           "non-negative integers (below 2^53)",
                           name);
    e->begin = range[0], e->end = range[1];
    if (e->begin > e->end)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] end before they begin",
                           name, e->begin, e->end);
    if (e->end > data_size)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] exceed the %" PRIu64 " bytes of data after the header",
                           name, e->begin, e->end, data_size);
    char text[TL_MAX_DIMS * 22 + 4];
    shape_text(e->shape, e->ndim, text, sizeof text);
    int64_t nbytes;
    if (!tl_size_mul(e->numel, (int64_t)e->dtype->size, &nbytes))
        return tl_io_error(TL_ERR_SHAPE, "load", file,
                           "tensor '%s': shape %s of %s needs more than 2^62 bytes", name, text,
                           e->dtype->name);
    if ((uint64_t)nbytes != e->end - e->begin)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "tensor '%s': shape %s of %s needs %" PRId64
                           " bytes, but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                           name, text, e->dtype->name, nbytes, e->begin, e->end, e->end - e->begin);
    return TL_OK;
}

/* The tensors, sorted by offsets, must cover [0, data_size) exactly once. */
static tl_status check_tiling(const char *file, const st_entry *entries, int count,
                              uint64_t data_size) {
    const st_entry **order = malloc((size_t)(count ? count : 1) * sizeof *order);
    if (!order) return tl_error(TL_ERR_MEMORY, "load: out of memory reading '%s'", file);
    for (int i = 0; i < count; i++) order[i] = &entries[i];
    qsort(order, (size_t)count, sizeof *order, compare_entry_offsets);
    tl_status status = TL_OK;
    uint64_t covered = 0; /* the data before it is taken */
    for (int i = 0; i < count && status == TL_OK; i++) {
        const st_entry *e = order[i], *before = i ? order[i - 1] : NULL;
        if (e->begin < covered)
            status =
                tl_io_error(TL_ERR_ARGUMENT, "load", file,
                            "tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64
                            ", %" PRIu64 "] overlap in the data",
                            before->name, before->begin, before->end, e->name, e->begin, e->end);
        else if (e->begin > covered && !before)
            status = tl_io_error(TL_ERR_ARGUMENT, "load", file,
                                 "the data begins with a hole of %" PRIu64
                                 " bytes: its first tensor '%s' [%" PRIu64 ", %" PRIu64
                                 "] should begin at 0 (the tensors must tile the data)",
                                 e->begin, e->name, e->begin, e->end);
        else if (e->begin > covered)
            status = tl_io_error(TL_ERR_ARGUMENT, "load", file,
                                 "a hole of %" PRIu64 " bytes between tensors '%s' [%" PRIu64
                                 ", %" PRIu64 "] and '%s' [%" PRIu64 ", %" PRIu64
                                 "] (the tensors must tile the data)",
                                 e->begin - covered, before->name, before->begin, before->end,
                                 e->name, e->begin, e->end);
        covered = e->end;
    }
    if (status == TL_OK && covered != data_size)
        status = tl_io_error(TL_ERR_ARGUMENT, "load", file,
                             "%" PRIu64 " trailing bytes: the tensors end at byte %" PRIu64
                             " of the data, which has %" PRIu64
                             " bytes (the tensors must tile the data)",
                             data_size - covered, covered, data_size);
    free(order);
    return status;
}

/* "__metadata__": an object of strings with unique keys, sorted by key into meta. */
static tl_status parse_metadata(const char *file, const cJSON *metadata, const cJSON **meta,
                                int *count) {
    if (!cJSON_IsObject(metadata))
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "\"__metadata__\" is %s, expected an object of strings",
                           json_kind(metadata));
    int m = 0;
    for (const cJSON *item = metadata->child; item; item = item->next) {
        if (!cJSON_IsString(item))
            return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                               "metadata '%s' is %s, expected a string", item->string,
                               json_kind(item));
        meta[m++] = item;
    }
    qsort(meta, (size_t)m, sizeof *meta, compare_json_keys);
    for (int i = 1; i < m; i++)
        if (strcmp(meta[i - 1]->string, meta[i]->string) == 0)
            return tl_io_error(TL_ERR_ARGUMENT, "load", file, "metadata has two keys '%s'",
                               meta[i]->string);
    *count = m;
    return TL_OK;
}

/* The text itself: '{' first, UTF-8, no control characters but JSON's spaces. */
static tl_status check_text(const char *file, const char *text, size_t length) {
    if (length == 0)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "header is empty (length 0), expected a JSON object");
    unsigned char first = (unsigned char)text[0];
    if (first != '{') {
        char shown[8] = "";
        if (first > ' ' && first < 127) snprintf(shown, sizeof shown, " ('%c')", first);
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "header starts with byte 0x%02X%s, expected '{' (a JSON object)", first,
                           shown);
    }
    size_t bad;
    if (!st_is_utf8(text, length, &bad))
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "header is not valid UTF-8 (byte %zu of %zu)", bad, length);
    for (size_t i = 0; i < length; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                               "header holds control character 0x%02X at byte %zu of %zu", c, i,
                               length);
    }
    return TL_OK;
}

/* The JSON object, and nothing but spaces after it. */
static tl_status parse_json(const char *file, const char *text, size_t length, cJSON **root) {
    const char *end = NULL;
    cJSON *parsed = cJSON_ParseWithLengthOpts(text, length, &end, false);
    if (!parsed)
        return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                           "header is not valid JSON (error near byte %td of %zu)",
                           end && end >= text ? end - text : 0, length);
    for (const char *p = end; p < text + length; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(parsed);
            return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                               "header has bytes other than spaces after its JSON object (at "
                               "byte %td of %zu)",
                               p - text, length);
        }
    if (!cJSON_IsObject(parsed)) {
        tl_status status = tl_io_error(TL_ERR_ARGUMENT, "load", file,
                                       "header is %s, expected a JSON object", json_kind(parsed));
        cJSON_Delete(parsed);
        return status;
    }
    *root = parsed;
    return TL_OK;
}

/* Every entry and the metadata; then unique names and the tiling. */
static tl_status check_entries(const char *file, uint64_t data_size, st_header *h) {
    const cJSON *metadata = NULL;
    for (const cJSON *item = h->root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (metadata)
                return tl_io_error(TL_ERR_ARGUMENT, "load", file,
                                   "header has two \"__metadata__\" objects");
            metadata = item;
            continue;
        }
        TL_TRY(parse_entry(file, item, data_size, &h->entries[h->count]));
        h->count++;
    }
    qsort(h->entries, (size_t)h->count, sizeof *h->entries, compare_entry_names);
    for (int i = 1; i < h->count; i++)
        if (strcmp(h->entries[i - 1].name, h->entries[i].name) == 0)
            return tl_io_error(TL_ERR_ARGUMENT, "load", file, "header names two tensors '%s'",
                               h->entries[i].name);
    TL_TRY(check_tiling(file, h->entries, h->count, data_size));
    if (metadata) TL_TRY(parse_metadata(file, metadata, h->meta, &h->metadata_count));
    return TL_OK;
}

tl_status st_header_parse(const char *file, const char *text, size_t length, uint64_t data_size,
                          st_header *header) {
    st_header h = {0};
    TL_TRY(check_text(file, text, length));
    TL_TRY(parse_json(file, text, length, &h.root));
    int items = cJSON_GetArraySize(h.root);
    const cJSON *metadata = cJSON_GetObjectItemCaseSensitive(h.root, "__metadata__");
    int meta_items = cJSON_IsObject(metadata) ? cJSON_GetArraySize(metadata) : 0;
    h.entries = calloc((size_t)items + 1, sizeof *h.entries);
    h.meta = calloc((size_t)meta_items + 1, sizeof *h.meta);
    tl_status status = TL_OK;
    if (!h.entries || !h.meta)
        status = tl_error(TL_ERR_MEMORY, "load: out of memory reading '%s'", file);
    if (status == TL_OK) status = check_entries(file, data_size, &h);
    if (status != TL_OK) {
        st_header_free(&h);
        return status;
    }
    *header = h;
    return TL_OK;
}

void st_header_free(st_header *header) {
    cJSON_Delete(header->root);
    free(header->entries);
    free(header->meta);
    *header = (st_header){0};
}
