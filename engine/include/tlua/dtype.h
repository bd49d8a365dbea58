/* Element types, their names, promotion rules and the bf16/f16 conversions. */
#ifndef TLUA_DTYPE_H
#define TLUA_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tl_dtype {
    TL_F32,
    TL_F64,
    TL_BF16,
    TL_F16,
    TL_I32,
    TL_I64,
    TL_BOOL,
    TL_DTYPE_COUNT
} tl_dtype;

size_t tl_dtype_size(tl_dtype dtype);
/* "float32", "float64", "bfloat16", "float16", "int32", "int64", "bool". */
const char *tl_dtype_name(tl_dtype dtype);
/* Accepts the names above and the aliases float, double, half, int, long. */
tl_status tl_dtype_parse(const char *name, tl_dtype *out);
bool tl_dtype_is_floating(tl_dtype dtype);
/* int32 and int64 (bool is neither floating nor integral). */
bool tl_dtype_is_integral(tl_dtype dtype);
/* The dtype of a binary op's result: bool < integers < floating, wider wins;
   bf16 with f16 gives f32 (as PyTorch). */
tl_dtype tl_promote_types(tl_dtype a, tl_dtype b);

/* Round to nearest even; NaN stays NaN (quiet), infinities stay infinite. */
uint16_t tl_f32_to_bf16(float value);
float tl_bf16_to_f32(uint16_t bits);
uint16_t tl_f32_to_f16(float value);
float tl_f16_to_f32(uint16_t bits);

/* A number passed to an op: integer, floating or boolean, as Lua gives it. */
typedef enum tl_scalar_kind { TL_SCALAR_INT, TL_SCALAR_FLOAT, TL_SCALAR_BOOL } tl_scalar_kind;
typedef struct tl_scalar {
    tl_scalar_kind kind;
    union {
        int64_t i;
        double f;
        bool b;
    } value;
} tl_scalar;

static inline tl_scalar tl_scalar_int(int64_t v) {
    tl_scalar s;
    s.kind = TL_SCALAR_INT;
    s.value.i = v;
    return s;
}
static inline tl_scalar tl_scalar_float(double v) {
    tl_scalar s;
    s.kind = TL_SCALAR_FLOAT;
    s.value.f = v;
    return s;
}
static inline tl_scalar tl_scalar_bool(bool v) {
    tl_scalar s;
    s.kind = TL_SCALAR_BOOL;
    s.value.b = v;
    return s;
}
double tl_scalar_to_double(tl_scalar s);
int64_t tl_scalar_to_int(tl_scalar s);

/* Writes one element of `dtype` at dst from a double / reads one as a double.
   Slow paths for constructors, item() and printing, not for kernels. */
void tl_dtype_store(tl_dtype dtype, void *dst, tl_scalar value);
/* TL_OK when value can be stored in dtype without overflow (an integer dtype takes a finite
   number whose integer part fits; floating dtypes and bool take any value), else an error
   "op: value V cannot be converted to DTYPE without overflow". */
tl_status tl_scalar_check_fits(const char *op, tl_dtype dtype, tl_scalar value);
tl_scalar tl_dtype_load(tl_dtype dtype, const void *src);

#ifdef __cplusplus
}
#endif

#endif
