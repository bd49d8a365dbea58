/* dtype sizes, names, promotion, scalar conversion and bf16/f16 rounding. */
#include <math.h>
#include <string.h>

#include "tlua/dtype.h"
#include "core/half.h"

static const struct {
    const char *name;
    size_t size;
} dtype_facts[TL_DTYPE_COUNT] = {
    [TL_F32] = {"float32", 4}, [TL_F64] = {"float64", 8}, [TL_BF16] = {"bfloat16", 2},
    [TL_F16] = {"float16", 2}, [TL_I32] = {"int32", 4},   [TL_I64] = {"int64", 8},
    [TL_BOOL] = {"bool", 1},
};

size_t tl_dtype_size(tl_dtype dtype) {
    return dtype_facts[dtype].size;
}
const char *tl_dtype_name(tl_dtype dtype) {
    return (unsigned)dtype < TL_DTYPE_COUNT ? dtype_facts[dtype].name : "invalid";
}

tl_status tl_dtype_parse(const char *name, tl_dtype *out) {
    static const struct {
        const char *alias;
        tl_dtype dtype;
    } aliases[] = {{"float", TL_F32}, {"double", TL_F64}, {"half", TL_F16},
                   {"int", TL_I32},   {"long", TL_I64},   {"bf16", TL_BF16}};
    for (int d = 0; d < TL_DTYPE_COUNT; d++) {
        if (strcmp(name, dtype_facts[d].name) == 0) {
            *out = (tl_dtype)d;
            return TL_OK;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        if (strcmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].dtype;
            return TL_OK;
        }
    }
    return tl_error(TL_ERR_DTYPE,
                    "dtype: unknown dtype '%s' (expected float32, float64, bfloat16, float16, "
                    "int32, int64 or bool)",
                    name);
}

bool tl_dtype_is_floating(tl_dtype d) {
    return d == TL_F32 || d == TL_F64 || d == TL_BF16 || d == TL_F16;
}
bool tl_dtype_is_integral(tl_dtype d) {
    return d == TL_I32 || d == TL_I64;
}

/* bool 0, integers 1, floating 2 */
static int category(tl_dtype d) {
    return d == TL_BOOL ? 0 : tl_dtype_is_integral(d) ? 1 : 2;
}

tl_dtype tl_promote_types(tl_dtype a, tl_dtype b) {
    if (a == b) return a;
    int ca = category(a), cb = category(b);
    if (ca != cb) return ca > cb ? a : b;
    if (ca == 1) return TL_I64; /* int32 with int64 */
    /* two different floating types */
    if (a == TL_F64 || b == TL_F64) return TL_F64;
    return TL_F32; /* f32 with a 16-bit type, or bf16 with f16 */
}

double tl_scalar_to_double(tl_scalar s) {
    switch (s.kind) {
    case TL_SCALAR_INT:
        return (double)s.value.i;
    case TL_SCALAR_BOOL:
        return s.value.b ? 1.0 : 0.0;
    default:
        return s.value.f;
    }
}

int64_t tl_scalar_to_int(tl_scalar s) {
    switch (s.kind) {
    case TL_SCALAR_INT:
        return s.value.i;
    case TL_SCALAR_BOOL:
        return s.value.b;
    default: {
        double f = s.value.f;
        if (isnan(f)) return 0;
        if (f >= 9.2233720368547758e18) return INT64_MAX;
        if (f <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)f;
    }
    }
}

tl_status tl_scalar_check_fits(const char *op, tl_dtype dtype, tl_scalar value) {
    if (dtype != TL_I32 && dtype != TL_I64) return TL_OK;
    bool fits;
    double f = value.value.f;
    if (value.kind == TL_SCALAR_FLOAT) /* the integer part must fit; false for NaN */
        fits = dtype == TL_I32 ? f > -2147483649.0 && f < 2147483648.0 : f >= -0x1p63 && f < 0x1p63;
    else if (value.kind == TL_SCALAR_INT)
        fits = dtype == TL_I64 || (value.value.i >= INT32_MIN && value.value.i <= INT32_MAX);
    else
        fits = true;
    if (fits) return TL_OK;
    if (value.kind == TL_SCALAR_INT)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: value %lld cannot be converted to %s without overflow", op,
                        (long long)value.value.i, tl_dtype_name(dtype));
    return tl_error(TL_ERR_ARGUMENT, "%s: value %g cannot be converted to %s without overflow", op,
                    value.value.f, tl_dtype_name(dtype));
}

/* one source for the conversions: core/half.h, also compiled into the CPU and CUDA kernels */
uint16_t tl_f32_to_bf16(float value) {
    return tl_bf16_round(value);
}

float tl_bf16_to_f32(uint16_t bits) {
    return tl_bf16_load(bits);
}

uint16_t tl_f32_to_f16(float value) {
    return tl_f16_round(value);
}

float tl_f16_to_f32(uint16_t bits) {
    return tl_f16_load(bits);
}

void tl_dtype_store(tl_dtype dtype, void *dst, tl_scalar value) {
    switch (dtype) {
    case TL_F32:
        *(float *)dst = (float)tl_scalar_to_double(value);
        break;
    case TL_F64:
        *(double *)dst = tl_scalar_to_double(value);
        break;
    case TL_BF16:
        *(uint16_t *)dst = tl_f32_to_bf16((float)tl_scalar_to_double(value));
        break;
    case TL_F16:
        *(uint16_t *)dst = tl_f32_to_f16((float)tl_scalar_to_double(value));
        break;
    case TL_I32:
        *(int32_t *)dst = (int32_t)tl_scalar_to_int(value);
        break;
    case TL_I64:
        *(int64_t *)dst = tl_scalar_to_int(value);
        break;
    case TL_BOOL:
        *(uint8_t *)dst =
            value.kind == TL_SCALAR_BOOL ? value.value.b : tl_scalar_to_double(value) != 0;
        break;
    default:
        break;
    }
}

tl_scalar tl_dtype_load(tl_dtype dtype, const void *src) {
    switch (dtype) {
    case TL_F32:
        return tl_scalar_float(*(const float *)src);
    case TL_F64:
        return tl_scalar_float(*(const double *)src);
    case TL_BF16:
        return tl_scalar_float(tl_bf16_to_f32(*(const uint16_t *)src));
    case TL_F16:
        return tl_scalar_float(tl_f16_to_f32(*(const uint16_t *)src));
    case TL_I32:
        return tl_scalar_int(*(const int32_t *)src);
    case TL_I64:
        return tl_scalar_int(*(const int64_t *)src);
    case TL_BOOL:
        return tl_scalar_bool(*(const uint8_t *)src != 0); /* bool bytes: any non-zero is true */
    default:
        return tl_scalar_int(0);
    }
}
