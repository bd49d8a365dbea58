/* The thread-local error message behind tl_last_error(), and the index-range message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tlua/error.h"

static _Thread_local char last_error[1024];

const char *tl_last_error(void) {
    return last_error;
}

tl_status tl_error(tl_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

void tl_clear_error(void) {
    last_error[0] = '\0';
}

tl_status tl_index_range_error(const tl_index_range *range, const int64_t *shape, int ndim,
                               int64_t value, int64_t position) {
    char dims[256];
    size_t used = (size_t)snprintf(dims, sizeof dims, "[");
    for (int d = 0; d < ndim && used < sizeof dims; d++)
        used += (size_t)snprintf(dims + used, sizeof dims - used, d ? ", %lld" : "%lld",
                                 (long long)shape[d]);
    if (used < sizeof dims) snprintf(dims + used, sizeof dims - used, "]");
    /* the last valid index, count - 1 first: a range without an upper end has count INT64_MAX */
    const int64_t last = range->count - 1 + range->first;
    return tl_error(TL_ERR_INDEX,
                    "%s: %s holds %lld at position %lld (shape %s), out of range for %s (expected "
                    "%lld <= index <= %lld%s%s)",
                    range->op, range->what, (long long)value, (long long)(range->first + position),
                    dims, range->range_of, (long long)range->first, (long long)last,
                    range->note ? "; " : "", range->note ? range->note : "");
}

tl_status tl_error_as(tl_status status, const char *op) {
    if (status == TL_OK || !op) return status;
    /* the failing op's name: the identifier before the first ": " */
    size_t name = strspn(last_error, "abcdefghijklmnopqrstuvwxyz0123456789_");
    if (name == 0 || strncmp(last_error + name, ": ", 2) != 0) return status;
    if (strlen(op) == name && strncmp(last_error, op, name) == 0) return status;
    char renamed[sizeof last_error];
    snprintf(renamed, sizeof renamed, "%s%s", op, last_error + name);
    memcpy(last_error, renamed, sizeof last_error);
    return status;
}
