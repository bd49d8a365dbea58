/* The C unit tests' assertions: CHECK(cond, fmt, ...) and OK(call) count and report failures. */
#ifndef TLUA_TEST_CHECK_H
#define TLUA_TEST_CHECK_H

#include <stdio.h>

#include "tlua/error.h"

/* one test program per translation unit: these are its counters */
static int failures, checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)
#define OK(expr) CHECK((expr) == TL_OK, "%s: %s", #expr, tl_last_error())

#endif
