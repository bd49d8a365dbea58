/* Status codes and the thread-local error message every failing call sets. */
#ifndef TLUA_ERROR_H
#define TLUA_ERROR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tl_status {
    TL_OK = 0,
    TL_ERR_ARGUMENT, /* a bad value or type of argument */
    TL_ERR_SHAPE,    /* shapes that do not fit or broadcast */
    TL_ERR_DTYPE,    /* a dtype the op does not accept */
    TL_ERR_DEVICE,   /* a device mismatch or a device not present */
    TL_ERR_INDEX,    /* an index or dim out of range */
    TL_ERR_MEMORY,   /* an allocation failed */
    TL_ERR_RUNTIME,  /* a failure of a library or device (cuBLAS, CUDA launch) */
    TL_ERR_AUTOGRAD, /* a misuse of autograd (no grad required, stale saved tensor) */
} tl_status;

/* The message of the last failing call on this thread ("" when none). */
const char *tl_last_error(void);

/* Sets the message (printf-style) and returns status, so callers can write
   `return tl_error(TL_ERR_SHAPE, "add: ...", ...);`. */
tl_status tl_error(tl_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Names op as the failing op in the last message ("fill_: value ..." becomes "full: value
   ..."), so that an op made of others reports under the name its caller used; returns status.
   A message that does not start with "name: " is left as it is. */
tl_status tl_error_as(tl_status status, const char *op);
/* Clears the message. */
void tl_clear_error(void);

/* An index range check (tl_check_index_range in tlua/nn.h): what its error names when an index
   value falls outside [first, first + count). The error (TL_ERR_INDEX) reads "<op>: <what> holds
   V at position P (shape S), out of range for <range_of> (expected first <= index <= last[;
   note])", positions counted from `first` too. The strings must outlive the check (string
   literals): on CUDA the message is written later. */
typedef struct tl_index_range {
    const char *op, *what, *range_of;
    const char *note; /* may be NULL */
    int64_t first, count;
} tl_index_range;
/* Sets that message for an indices tensor of shape [ndim] whose element at flat position (from
   0) holds value; returns TL_ERR_INDEX. */
tl_status tl_index_range_error(const tl_index_range *range, const int64_t *shape, int ndim,
                               int64_t value, int64_t position);

/* Returns from the calling function when expr fails (its status and message
   stand). Only where nothing needs releasing on that path. */
#define TL_TRY(expr)                                                                               \
    do {                                                                                           \
        tl_status tl_try_status_ = (expr);                                                         \
        if (tl_try_status_ != TL_OK) return tl_try_status_;                                        \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
