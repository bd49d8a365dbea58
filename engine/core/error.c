/* The thread-local error message behind tl_last_error(). */
#include <stdarg.h>
#include <stdio.h>

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
