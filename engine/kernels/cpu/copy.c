/* CPU cast kernels (op `cast`): dst = src elementwise, same shape (src may be expanded),
   keyed by src's dtype, every dst dtype. bool = value != 0; float -> int truncates
   toward zero (NaN -> 0, out of range saturates); to bf16/f16 rounds to nearest even
   once (f64 and int64 sources without double rounding). Same dtypes copy bytes, except bool:
   every bool byte is read as byte != 0, so a copy holds only 0 and 1. */
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

/* ---- same dtype: bytes --------------------------------------------------- */
#define COPY_LOOP(name, T)                                                                         \
    static void name(char **p, const int64_t *s, int64_t n, const void *ctx) {                     \
        (void)ctx;                                                                                 \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                            \
            memcpy(p[0], p[1], (size_t)n * sizeof(T));                                             \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                *(T *)(p[0] + i * s[0]) = *(const T *)(p[1] + i * s[1]);                           \
        }                                                                                          \
    }

COPY_LOOP(copy16, uint16_t)
COPY_LOOP(copy32, uint32_t)
COPY_LOOP(copy64, uint64_t)

/* ---- different dtypes ---------------------------------------------------- */
/* each source dtype: element type, and how it loads into a value of kind
   F (float: f32, bf16, f16 exactly), D (double) or I (int64: ints and bool; bool8 names bool here,
   as bool is a macro) */
#define T_f32         float
#define T_f64         double
#define T_bf16        uint16_t
#define T_f16         uint16_t
#define T_i32         int32_t
#define T_i64         int64_t
#define T_bool8       uint8_t
#define LOAD_f32      (float)
#define LOAD_f64      (double)
#define LOAD_bf16     tl_bf16_load
#define LOAD_f16      tl_f16_load
#define LOAD_i32      (int64_t)
#define LOAD_i64      (int64_t)
#define LOAD_bool8(v) ((int64_t)((v) != 0))
#define KIND_f32      F
#define KIND_f64      D
#define KIND_bf16     F
#define KIND_f16      F
#define KIND_i32      I
#define KIND_i64      I
#define KIND_bool8    I

/* a value of each kind stored as each destination dtype */
#define STORE_F_f32(v)       (v)
#define STORE_F_f64(v)       ((double)(v))
#define STORE_F_bf16(v)      tl_bf16_round(v)
#define STORE_F_f16(v)       tl_f16_round(v)
#define STORE_F_i32(v)       tl_double_to_i32(v)
#define STORE_F_i64(v)       tl_double_to_i64(v)
#define STORE_F_bool8(v)     ((uint8_t)((v) != 0))
#define STORE_D_f32(v)       ((float)(v))
#define STORE_D_bf16(v)      tl_bf16_round(tl_double_to_f32_odd(v))
#define STORE_D_f16(v)       tl_f16_round(tl_double_to_f32_odd(v))
#define STORE_D_i32(v)       tl_double_to_i32(v)
#define STORE_D_i64(v)       tl_double_to_i64(v)
#define STORE_D_bool8(v)     ((uint8_t)((v) != 0))
#define STORE_I_f32(v)       ((float)(v))
#define STORE_I_f64(v)       ((double)(v))
#define STORE_I_bf16(v)      tl_bf16_round(tl_i64_to_f32_odd(v))
#define STORE_I_f16(v)       tl_f16_round(tl_i64_to_f32_odd(v))
#define STORE_I_i32(v)       ((int32_t)(uint32_t)(v)) /* wraps */
#define STORE_I_i64(v)       ((int64_t)(v))
#define STORE_I_bool8(v)     ((uint8_t)((v) != 0))
#define STORE_OF(kind, dst)  STORE_OF_(kind, dst)
#define STORE_OF_(kind, dst) STORE_##kind##_##dst

#define CAST_LOOP(name, TS, TD, LOAD, STORE)                                                       \
    static void name(char **p, const int64_t *s, int64_t n, const void *ctx) {                     \
        (void)ctx;                                                                                 \
        TD *o = (TD *)p[0];                                                                        \
        const TS *in = (const TS *)p[1];                                                           \
        if (s[0] == (int64_t)sizeof(TD) && s[1] == (int64_t)sizeof(TS)) {                          \
            for (int64_t i = 0; i < n; i++) o[i] = STORE(LOAD(in[i]));                             \
        } else if (s[0] == (int64_t)sizeof(TD) && s[1] == 0) {                                     \
            const TD value = STORE(LOAD(in[0]));                                                   \
            for (int64_t i = 0; i < n; i++) o[i] = value;                                          \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                *(TD *)(p[0] + i * s[0]) = STORE(LOAD(*(const TS *)(p[1] + i * s[1])));            \
        }                                                                                          \
    }
#define CAST(src, dst)                                                                             \
    CAST_LOOP(cast_##src##_##dst, T_##src, T_##dst, LOAD_##src, STORE_OF(KIND_##src, dst))

/* one row of cast loops per source dtype */
// clang-format off
CAST(f32, f64) CAST(f32, bf16) CAST(f32, f16) CAST(f32, i32) CAST(f32, i64) CAST(f32, bool8)
CAST(f64, f32) CAST(f64, bf16) CAST(f64, f16) CAST(f64, i32) CAST(f64, i64) CAST(f64, bool8)
CAST(bf16, f32) CAST(bf16, f64) CAST(bf16, f16) CAST(bf16, i32) CAST(bf16, i64) CAST(bf16, bool8)
CAST(f16, f32) CAST(f16, f64) CAST(f16, bf16) CAST(f16, i32) CAST(f16, i64) CAST(f16, bool8)
CAST(i32, f32) CAST(i32, f64) CAST(i32, bf16) CAST(i32, f16) CAST(i32, i64) CAST(i32, bool8)
CAST(i64, f32) CAST(i64, f64) CAST(i64, bf16) CAST(i64, f16) CAST(i64, i32) CAST(i64, bool8)
CAST(bool8, f32) CAST(bool8, f64) CAST(bool8, bf16) CAST(bool8, f16) CAST(bool8, i32) CAST(bool8, i64)
CAST(bool8, bool8)
    // clang-format on

    /* cast_loops[src][dst], rows and columns in the order of tl_dtype: f32, f64, bf16, f16,
           i32, i64, bool; the diagonal copies bytes (bool: normalized to 0 and 1) */
    _Static_assert(TL_F32 == 0 && TL_F64 == 1 && TL_BF16 == 2 && TL_F16 == 3 && TL_I32 == 4 &&
                       TL_I64 == 5 && TL_BOOL == 6,
                   "cast_loops follows the order of tl_dtype");
static const tl_cpu_loop_fn cast_loops[TL_DTYPE_COUNT][TL_DTYPE_COUNT] = {
    {copy32, cast_f32_f64, cast_f32_bf16, cast_f32_f16, cast_f32_i32, cast_f32_i64, cast_f32_bool8},
    {cast_f64_f32, copy64, cast_f64_bf16, cast_f64_f16, cast_f64_i32, cast_f64_i64, cast_f64_bool8},
    {cast_bf16_f32, cast_bf16_f64, copy16, cast_bf16_f16, cast_bf16_i32, cast_bf16_i64,
     cast_bf16_bool8},
    {cast_f16_f32, cast_f16_f64, cast_f16_bf16, copy16, cast_f16_i32, cast_f16_i64, cast_f16_bool8},
    {cast_i32_f32, cast_i32_f64, cast_i32_bf16, cast_i32_f16, copy32, cast_i32_i64, cast_i32_bool8},
    {cast_i64_f32, cast_i64_f64, cast_i64_bf16, cast_i64_f16, cast_i64_i32, copy64, cast_i64_bool8},
    {cast_bool8_f32, cast_bool8_f64, cast_bool8_bf16, cast_bool8_f16, cast_bool8_i32,
     cast_bool8_i64, cast_bool8_bool8},
};

static tl_status cast_kernel(tl_tensor *dst, const tl_tensor *src) {
    tl_cpu_for_each(2, (const tl_tensor *const[]){dst, src}, cast_loops[src->dtype][dst->dtype],
                    NULL);
    return TL_OK;
}

#define ENTRY(dtype, suffix)                                                                       \
    {                                                                                              \
        TL_OP_cast, dtype, "cpu_cast_" #suffix, {                                                  \
            .copy = cast_kernel                                                                    \
        }                                                                                          \
    }

static const tl_kernel_entry entries[] = {
    ENTRY(TL_F32, f32), ENTRY(TL_F64, f64), ENTRY(TL_BF16, bf16), ENTRY(TL_F16, f16),
    ENTRY(TL_I32, i32), ENTRY(TL_I64, i64), ENTRY(TL_BOOL, bool),
};

TL_KERNEL_TABLE(tl_cpu_copy_table, TL_DEVICE_CPU, entries);
