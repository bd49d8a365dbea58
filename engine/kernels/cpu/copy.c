/* CPU cast kernels (op `cast`): dst = src elementwise, same shape (src may be expanded),
   keyed by src's dtype, every dst dtype. bool = value != 0; float -> int truncates
   toward zero (NaN -> 0, out of range saturates); to bf16/f16 rounds to nearest even
   once (f64 and int64 sources without double rounding). Same dtypes copy bytes, except bool:
   every bool byte is read as byte != 0, so a copy holds only 0 and 1. */
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

/* The inner loop of a cast: out[i] = convert(in[i]) for n elements of sizes so (out) and si (in),
   with flat loops where dense and for a broadcast input. Always inlined with constant sizes and
   convert, so each (source, destination) pair gets its own vectorisable loop. */
typedef void (*convert_fn)(char *dst, const char *src);
static inline __attribute__((always_inline)) void
cast_loop(char **p, const int64_t *s, int64_t n, int64_t so, int64_t si, convert_fn convert) {
    char *o = p[0];
    const char *in = p[1];
    if (s[0] == so && s[1] == si) {
        for (int64_t i = 0; i < n; i++) convert(o + i * so, in + i * si);
    } else if (s[0] == so && s[1] == 0) {
        char value[8];
        convert(value, in);
        for (int64_t i = 0; i < n; i++) memcpy(o + i * so, value, (size_t)so);
    } else {
        for (int64_t i = 0; i < n; i++) convert(o + i * s[0], in + i * s[1]);
    }
}

/* ---- loads: each source dtype as a value of kind float (f32, bf16, f16 exactly), double, or
   int64 (integers and bool) ---------------------------------------------------------------- */
static inline float ld_f32(const char *p) {
    return *(const float *)p;
}
static inline double ld_f64(const char *p) {
    return *(const double *)p;
}
static inline float ld_bf16(const char *p) {
    return tl_bf16_load(*(const uint16_t *)p);
}
static inline float ld_f16(const char *p) {
    return tl_f16_load(*(const uint16_t *)p);
}
static inline int64_t ld_i32(const char *p) {
    return *(const int32_t *)p;
}
static inline int64_t ld_i64(const char *p) {
    return *(const int64_t *)p;
}
static inline int64_t ld_bool(const char *p) {
    return *(const uint8_t *)p != 0;
}

/* ---- stores: a value of each kind as each destination dtype ------------------------------ */
static inline void st_f32(char *p, double v) { /* from float or double; int64 below */
    *(float *)p = (float)v;
}
static inline void st_f64(char *p, double v) {
    *(double *)p = v;
}
static inline void st_bf16(char *p, float v) {
    *(uint16_t *)p = tl_bf16_round(v);
}
static inline void st_f16(char *p, float v) {
    *(uint16_t *)p = tl_f16_round(v);
}
static inline void st_i32(char *p, double v) { /* truncated, saturated, NaN -> 0 */
    *(int32_t *)p = tl_double_to_i32(v);
}
static inline void st_i64(char *p, double v) {
    *(int64_t *)p = tl_double_to_i64(v);
}
static inline void st_bool(char *p, double v) {
    *(uint8_t *)p = v != 0;
}
static inline void st_int_f32(char *p, int64_t v) {
    *(float *)p = (float)v;
}
static inline void st_int_i32(char *p, int64_t v) { /* wraps */
    *(int32_t *)p = (int32_t)(uint32_t)v;
}
static inline void st_int_i64(char *p, int64_t v) {
    *(int64_t *)p = v;
}
static inline void st_int_bool(char *p, int64_t v) {
    *(uint8_t *)p = v != 0;
}

/* ---- conversions: a load and a store; to bf16/f16 one rounding (f64 and int64 through f32
   rounded to odd) ---------------------------------------------------------------------------- */
// clang-format off
static inline void f32_f64(char *d, const char *s) { st_f64(d, ld_f32(s)); }
static inline void f32_bf16(char *d, const char *s) { st_bf16(d, ld_f32(s)); }
static inline void f32_f16(char *d, const char *s) { st_f16(d, ld_f32(s)); }
static inline void f32_i32(char *d, const char *s) { st_i32(d, ld_f32(s)); }
static inline void f32_i64(char *d, const char *s) { st_i64(d, ld_f32(s)); }
static inline void f32_bool(char *d, const char *s) { st_bool(d, ld_f32(s)); }
static inline void f64_f32(char *d, const char *s) { st_f32(d, ld_f64(s)); }
static inline void f64_bf16(char *d, const char *s) { st_bf16(d, tl_double_to_f32_odd(ld_f64(s))); }
static inline void f64_f16(char *d, const char *s) { st_f16(d, tl_double_to_f32_odd(ld_f64(s))); }
static inline void f64_i32(char *d, const char *s) { st_i32(d, ld_f64(s)); }
static inline void f64_i64(char *d, const char *s) { st_i64(d, ld_f64(s)); }
static inline void f64_bool(char *d, const char *s) { st_bool(d, ld_f64(s)); }
static inline void bf16_f32(char *d, const char *s) { *(float *)d = ld_bf16(s); }
static inline void bf16_f64(char *d, const char *s) { st_f64(d, ld_bf16(s)); }
static inline void bf16_f16(char *d, const char *s) { st_f16(d, ld_bf16(s)); }
static inline void bf16_i32(char *d, const char *s) { st_i32(d, ld_bf16(s)); }
static inline void bf16_i64(char *d, const char *s) { st_i64(d, ld_bf16(s)); }
static inline void bf16_bool(char *d, const char *s) { st_bool(d, ld_bf16(s)); }
static inline void f16_f32(char *d, const char *s) { *(float *)d = ld_f16(s); }
static inline void f16_f64(char *d, const char *s) { st_f64(d, ld_f16(s)); }
static inline void f16_bf16(char *d, const char *s) { st_bf16(d, ld_f16(s)); }
static inline void f16_i32(char *d, const char *s) { st_i32(d, ld_f16(s)); }
static inline void f16_i64(char *d, const char *s) { st_i64(d, ld_f16(s)); }
static inline void f16_bool(char *d, const char *s) { st_bool(d, ld_f16(s)); }
static inline void i32_f32(char *d, const char *s) { st_int_f32(d, ld_i32(s)); }
static inline void i32_f64(char *d, const char *s) { st_f64(d, (double)ld_i32(s)); }
static inline void i32_bf16(char *d, const char *s) { st_bf16(d, tl_i64_to_f32_odd(ld_i32(s))); }
static inline void i32_f16(char *d, const char *s) { st_f16(d, tl_i64_to_f32_odd(ld_i32(s))); }
static inline void i32_i64(char *d, const char *s) { st_int_i64(d, ld_i32(s)); }
static inline void i32_bool(char *d, const char *s) { st_int_bool(d, ld_i32(s)); }
static inline void i64_f32(char *d, const char *s) { st_int_f32(d, ld_i64(s)); }
static inline void i64_f64(char *d, const char *s) { st_f64(d, (double)ld_i64(s)); }
static inline void i64_bf16(char *d, const char *s) { st_bf16(d, tl_i64_to_f32_odd(ld_i64(s))); }
static inline void i64_f16(char *d, const char *s) { st_f16(d, tl_i64_to_f32_odd(ld_i64(s))); }
static inline void i64_i32(char *d, const char *s) { st_int_i32(d, ld_i64(s)); }
static inline void i64_bool(char *d, const char *s) { st_int_bool(d, ld_i64(s)); }
static inline void bool_f32(char *d, const char *s) { st_int_f32(d, ld_bool(s)); }
static inline void bool_f64(char *d, const char *s) { st_f64(d, (double)ld_bool(s)); }
static inline void bool_bf16(char *d, const char *s) { st_bf16(d, (float)ld_bool(s)); }
static inline void bool_f16(char *d, const char *s) { st_f16(d, (float)ld_bool(s)); }
static inline void bool_i32(char *d, const char *s) { st_int_i32(d, ld_bool(s)); }
static inline void bool_i64(char *d, const char *s) { st_int_i64(d, ld_bool(s)); }
static inline void bool_bool(char *d, const char *s) { st_int_bool(d, ld_bool(s)); }
static inline void bits16(char *d, const char *s) { memcpy(d, s, 2); }
static inline void bits32(char *d, const char *s) { memcpy(d, s, 4); }
static inline void bits64(char *d, const char *s) { memcpy(d, s, 8); }
// clang-format on

/* ---- dispatch: one loop per source dtype, which picks the destination's loop once per call --- */
static inline __attribute__((always_inline)) void copy_loop(char **p, const int64_t *s, int64_t n,
                                                            int64_t size, convert_fn bits) {
    if (s[0] == size && s[1] == size)
        memcpy(p[0], p[1], (size_t)(n * size)); /* same dtype, dense: bytes */
    else
        cast_loop(p, s, n, size, size, bits);
}

static void from_f32(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        copy_loop(p, s, n, 4, bits32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 4, f32_f64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 4, f32_bf16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 4, f32_f16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 4, f32_i32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 4, f32_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 4, f32_bool);
        return;
    }
}
static void from_f64(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 8, f64_f32);
        return;
    case TL_F64:
        copy_loop(p, s, n, 8, bits64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 8, f64_bf16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 8, f64_f16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 8, f64_i32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 8, f64_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 8, f64_bool);
        return;
    }
}
static void from_bf16(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 2, bf16_f32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 2, bf16_f64);
        return;
    case TL_BF16:
        copy_loop(p, s, n, 2, bits16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 2, bf16_f16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 2, bf16_i32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 2, bf16_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 2, bf16_bool);
        return;
    }
}
static void from_f16(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 2, f16_f32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 2, f16_f64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 2, f16_bf16);
        return;
    case TL_F16:
        copy_loop(p, s, n, 2, bits16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 2, f16_i32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 2, f16_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 2, f16_bool);
        return;
    }
}
static void from_i32(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 4, i32_f32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 4, i32_f64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 4, i32_bf16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 4, i32_f16);
        return;
    case TL_I32:
        copy_loop(p, s, n, 4, bits32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 4, i32_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 4, i32_bool);
        return;
    }
}
static void from_i64(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 8, i64_f32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 8, i64_f64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 8, i64_bf16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 8, i64_f16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 8, i64_i32);
        return;
    case TL_I64:
        copy_loop(p, s, n, 8, bits64);
        return;
    default:
        cast_loop(p, s, n, 1, 8, i64_bool);
        return;
    }
}
/* bool -> bool normalises every byte to 0 or 1 */
static void from_bool(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const tl_dtype *)ctx) {
    case TL_F32:
        cast_loop(p, s, n, 4, 1, bool_f32);
        return;
    case TL_F64:
        cast_loop(p, s, n, 8, 1, bool_f64);
        return;
    case TL_BF16:
        cast_loop(p, s, n, 2, 1, bool_bf16);
        return;
    case TL_F16:
        cast_loop(p, s, n, 2, 1, bool_f16);
        return;
    case TL_I32:
        cast_loop(p, s, n, 4, 1, bool_i32);
        return;
    case TL_I64:
        cast_loop(p, s, n, 8, 1, bool_i64);
        return;
    default:
        cast_loop(p, s, n, 1, 1, bool_bool);
        return;
    }
}

/* by source dtype, in the order of tl_dtype */
_Static_assert(TL_F32 == 0 && TL_F64 == 1 && TL_BF16 == 2 && TL_F16 == 3 && TL_I32 == 4 &&
                   TL_I64 == 5 && TL_BOOL == 6,
               "cast_loops follows the order of tl_dtype");
static const tl_cpu_loop_fn cast_loops[TL_DTYPE_COUNT] = {from_f32, from_f64, from_bf16, from_f16,
                                                          from_i32, from_i64, from_bool};

static tl_status cast_kernel(tl_tensor *dst, const tl_tensor *src) {
    tl_dtype to = dst->dtype;
    tl_cpu_for_each(2, (const tl_tensor *const[]){dst, src}, cast_loops[src->dtype], &to);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cast, TL_DTYPES_ALL, copy, cast_kernel),
};

TL_KERNEL_TABLE(tl_cpu_copy_table, TL_DEVICE_CPU, entries);
