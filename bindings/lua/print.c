/* tostring(t): values in a nested layout (elided beyond 1000 elements) and a trailer line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

#define PRINT_THRESHOLD  1000 /* more elements than this: show the edges only */
#define PRINT_EDGE       3    /* elements kept at each end of an elided dim */
#define PRINT_MAX_SHOWN  100000
#define PRINT_LINE_WIDTH 80

typedef enum number_mode { MODE_INT, MODE_BOOL, MODE_FIXED, MODE_INTFLOAT, MODE_SCI } number_mode;

typedef struct layout {
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    int64_t kept[TL_MAX_DIMS]; /* elements shown along each dim */
    bool elided[TL_MAX_DIMS];
    int edge;
    const tl_scalar *values; /* the shown elements, row-major over kept */
    int64_t next;
    number_mode mode;
    int width;
    luaL_Buffer *b;
    int column;
} layout;

/* Which element of dim d the k-th shown one is. */
static int64_t shown_index(const layout *lay, int d, int64_t k) {
    if (!lay->elided[d] || k < lay->edge) return k;
    return lay->shape[d] - 2 * lay->edge + k;
}

static int format_value(char *buf, size_t size, tl_scalar s, number_mode mode) {
    switch (mode) {
    case MODE_BOOL:
        return snprintf(buf, size, "%s", tl_scalar_to_int(s) ? "true" : "false");
    case MODE_INT:
        return snprintf(buf, size, "%lld", (long long)tl_scalar_to_int(s));
    default:
        break;
    }
    double v = tl_scalar_to_double(s);
    if (isnan(v)) return snprintf(buf, size, "nan");
    if (isinf(v)) return snprintf(buf, size, v > 0 ? "inf" : "-inf");
    if (mode == MODE_INTFLOAT) return snprintf(buf, size, "%.0f.", v);
    if (mode == MODE_SCI) return snprintf(buf, size, "%.4e", v);
    return snprintf(buf, size, "%.4f", v);
}

/* Float formatting as PyTorch chooses it: integral values as "3.", a wide
   range or tiny/huge magnitudes in scientific notation, else 4 decimals. */
static number_mode float_mode(const tl_scalar *values, int64_t n) {
    bool any = false, all_integral = true;
    double min_abs = 0, max_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = tl_scalar_to_double(values[i]);
        if (!isfinite(v)) continue;
        double a = v < 0 ? -v : v;
        if (a < 4503599627370496.0 && v != (double)(int64_t)v) all_integral = false; /* 2^52 */
        if (a == 0) continue;
        if (!any || a < min_abs) min_abs = a;
        if (!any || a > max_abs) max_abs = a;
        any = true;
    }
    if (all_integral) return max_abs > 1e8 ? MODE_SCI : MODE_INTFLOAT;
    if (any && (max_abs / min_abs > 1000 || max_abs > 1e8 || min_abs < 1e-4)) return MODE_SCI;
    return MODE_FIXED;
}

static void add_spaces(layout *lay, int n) {
    for (int i = 0; i < n; i++) luaL_addchar(lay->b, ' ');
}

static void add_text(layout *lay, const char *s) {
    size_t n = strlen(s);
    luaL_addlstring(lay->b, s, n);
    lay->column += (int)n;
}

static void newline(layout *lay, int lines, int indent) {
    for (int i = 0; i < lines; i++) luaL_addchar(lay->b, '\n');
    add_spaces(lay, indent);
    lay->column = indent;
}

/* One item of the last dim, right-aligned, wrapping long rows. */
static void add_item(layout *lay, int64_t k, const char *text, int indent) {
    int len = (int)strlen(text);
    int width = len > lay->width ? len : lay->width;
    if (k > 0) {
        if (lay->column + 2 + width > PRINT_LINE_WIDTH) {
            luaL_addchar(lay->b, ',');
            newline(lay, 1, indent);
        } else {
            add_text(lay, ", ");
        }
    }
    add_spaces(lay, width - len);
    lay->column += width - len;
    add_text(lay, text);
}

static void emit(layout *lay, int d) {
    add_text(lay, "[");
    int indent = d + 1;
    if (d == lay->ndim - 1) {
        int64_t item = 0;
        for (int64_t k = 0; k < lay->kept[d]; k++) {
            if (lay->elided[d] && k == lay->edge) add_item(lay, item++, "...", indent);
            char buf[64];
            format_value(buf, sizeof buf, lay->values[lay->next++], lay->mode);
            add_item(lay, item++, buf, indent);
        }
    } else {
        int blank_lines = lay->ndim - d - 1;
        for (int64_t k = 0; k < lay->kept[d]; k++) {
            if (k > 0) {
                luaL_addchar(lay->b, ',');
                newline(lay, blank_lines, indent);
            }
            if (lay->elided[d] && k == lay->edge) {
                add_text(lay, "...,");
                newline(lay, blank_lines, indent);
            }
            emit(lay, d + 1);
        }
    }
    add_text(lay, "]");
}

/* Shown elements: all of them (one copy to the host) or, when elided, each
   kept element on its own. */
static tl_status gather(const tl_tensor *t, const layout *lay, bool elided, tl_scalar *values,
                        void *host) {
    if (!elided) {
        tl_status status = tl_to_host(t, host);
        if (status != TL_OK) return status;
        size_t size = tl_dtype_size(t->dtype);
        int64_t n = tl_numel(t);
        for (int64_t i = 0; i < n; i++)
            values[i] = tl_dtype_load(t->dtype, (const char *)host + (size_t)i * size);
        return TL_OK;
    }
    int64_t counter[TL_MAX_DIMS] = {0}, index[TL_MAX_DIMS];
    for (int64_t i = 0;; i++) {
        for (int d = 0; d < lay->ndim; d++) index[d] = shown_index(lay, d, counter[d]);
        TL_TRY(tl_get(t, index, &values[i]));
        int d = lay->ndim - 1;
        while (d >= 0 && ++counter[d] == lay->kept[d]) counter[d--] = 0;
        if (d < 0) return TL_OK;
    }
}

static int64_t plan(layout *lay, bool summarize, int edge) {
    int64_t shown = 1;
    lay->edge = edge;
    for (int d = 0; d < lay->ndim; d++) {
        lay->elided[d] = summarize && lay->shape[d] > 2 * edge;
        lay->kept[d] = lay->elided[d] ? 2 * edge : lay->shape[d];
        shown *= lay->kept[d];
    }
    return shown;
}

int tlb_tostring(lua_State *L) {
    tlb_box *box = lua_touserdata(L, 1);
    if (!box || !tlb_is_tensor(L, 1)) return tlb_errorf(L, "tostring: expected a tensor");
    const tl_tensor *t = box->tensor;
    if (!t) {
        lua_pushliteral(L, "[released tlua.Tensor]");
        return 1;
    }
    layout lay = {.ndim = t->ndim};
    memcpy(lay.shape, t->shape, sizeof lay.shape);
    int64_t numel = tl_numel(t);
    bool summarize = numel > PRINT_THRESHOLD;
    int64_t shown = plan(&lay, summarize, PRINT_EDGE);
    for (int edge = PRINT_EDGE - 1; shown > PRINT_MAX_SHOWN && edge >= 1; edge--)
        shown = plan(&lay, summarize, edge);
    bool any_elided = false;
    for (int d = 0; d < lay.ndim; d++) any_elided = any_elided || lay.elided[d];

    tl_scalar *values = NULL;
    if (numel > 0 && shown <= PRINT_MAX_SHOWN) {
        /* scratch memory in userdata: freed by the collector if anything raises */
        values = lua_newuserdatauv(L, sizeof *values * (size_t)shown, 0);
        void *host =
            any_elided ? NULL : lua_newuserdatauv(L, (size_t)numel * tl_dtype_size(t->dtype), 0);
        if (gather(t, &lay, any_elided, values, host) != TL_OK) return tlb_fail(L);
    }
    lay.values = values;
    if (t->dtype == TL_BOOL)
        lay.mode = MODE_BOOL;
    else if (tl_dtype_is_integral(t->dtype))
        lay.mode = MODE_INT;
    else
        lay.mode = values ? float_mode(values, shown) : MODE_FIXED;
    if (values) {
        for (int64_t i = 0; i < shown; i++) {
            char buf[64];
            int len = format_value(buf, sizeof buf, values[i], lay.mode);
            if (len > lay.width) lay.width = len;
        }
    }

    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lay.b = &b;
    if (numel == 0)
        luaL_addstring(&b, "[]");
    else if (!values)
        luaL_addstring(&b, "[...]");
    else if (t->ndim == 0) {
        char buf[64];
        format_value(buf, sizeof buf, values[0], lay.mode);
        luaL_addstring(&b, buf);
    } else {
        emit(&lay, 0);
    }
    char shape[512], device[16];
    tl_shape_str(t, shape, sizeof shape);
    char trailer[640];
    snprintf(trailer, sizeof trailer, "\n[%s tensor of shape %s on %s]", tl_dtype_name(t->dtype),
             shape, tl_device_name(tl_tensor_device(t), device));
    luaL_addstring(&b, trailer);
    luaL_pushresult(&b);
    return 1;
}
