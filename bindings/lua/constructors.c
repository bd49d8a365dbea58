/* Constructors: zeros, ones, empty, full, arange, linspace, eye, random tensors and *_like. */
#include "binding.h"

enum ctor_kind { CTOR_ZEROS, CTOR_ONES, CTOR_EMPTY, CTOR_RAND, CTOR_RANDN };

static tlb_options default_options(void) {
    return (tlb_options){.dtype = TL_F32, .device = TL_CPU, .requires_grad = -1};
}

static void check_sizes(lua_State *L, const char *op, const int64_t *shape, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            tlb_errorf(L, "%s: size of dim %d must be >= 0, got %lld", op, d + 1,
                       (long long)shape[d]);
}

/* Puts out (made with status) into the box on top of the stack, then applies the options. */
/* The result, or the error under the name the user called: the engine's constructors name
   themselves; the ones only Lua has ("zeros_like" of tl_zeros, "rand_like" of tl_rand) are
   renamed here. */
static int finish(lua_State *L, tlb_box *box, tl_status status, tl_tensor *out,
                  const tlb_options *opts, const char *op) {
    tlb_result(L, box, tl_error_as(status, op), out);
    tlb_apply_requires_grad(L, out, opts);
    return 1;
}

static tl_status make(enum ctor_kind kind, const int64_t *shape, int ndim, const tlb_options *o,
                      tl_tensor **out) {
    switch (kind) {
    case CTOR_ZEROS:
        return tl_zeros(shape, ndim, o->dtype, o->device, out);
    case CTOR_ONES:
        return tl_ones(shape, ndim, o->dtype, o->device, out);
    case CTOR_EMPTY:
        return tl_empty(shape, ndim, o->dtype, o->device, out);
    case CTOR_RAND:
        return tl_rand(shape, ndim, o->dtype, o->device, out);
    default:
        return tl_randn(shape, ndim, o->dtype, o->device, out);
    }
}

static int shape_ctor(lua_State *L, const char *op, enum ctor_kind kind) {
    int64_t shape[TL_MAX_DIMS];
    int opts_index;
    int ndim = tlb_shape_args(L, 1, op, shape, &opts_index);
    check_sizes(L, op, shape, ndim);
    tlb_options o = default_options();
    tlb_options_parse(L, opts_index, op, &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = make(kind, shape, ndim, &o, &out);
    return finish(L, box, status, out, &o, op);
}

static int ctor_zeros(lua_State *L) {
    return shape_ctor(L, "zeros", CTOR_ZEROS);
}
static int ctor_ones(lua_State *L) {
    return shape_ctor(L, "ones", CTOR_ONES);
}
static int ctor_empty(lua_State *L) {
    return shape_ctor(L, "empty", CTOR_EMPTY);
}
static int ctor_rand(lua_State *L) {
    return shape_ctor(L, "rand", CTOR_RAND);
}
static int ctor_randn(lua_State *L) {
    return shape_ctor(L, "randn", CTOR_RANDN);
}

/* Reads a shape given as one table or one integer at idx. */
static int shape_at(lua_State *L, int idx, const char *op, int64_t *shape) {
    if (lua_istable(L, idx)) return tlb_shape_table(L, idx, op, shape);
    if (lua_type(L, idx) == LUA_TNUMBER) {
        shape[0] = tlb_check_int(L, idx, op, "a size");
        return 1;
    }
    return tlb_type_error(L, idx, op, "a shape (a table of sizes)");
}

/* tl.full(shape, value, opts?): float32 unless opts.dtype (bool for a boolean value) */
static int ctor_full(lua_State *L) {
    int64_t shape[TL_MAX_DIMS];
    int ndim = shape_at(L, 1, "full", shape);
    check_sizes(L, "full", shape, ndim);
    tl_scalar value = tlb_check_scalar(L, 2, "full");
    tlb_options o = default_options();
    if (value.kind == TL_SCALAR_BOOL) o.dtype = TL_BOOL;
    tlb_options_parse(L, 3, "full", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = tl_full(shape, ndim, value, o.dtype, o.device, &out);
    return finish(L, box, status, out, &o, "full");
}

/* Reads the n numbers of arange (stop; or start, stop and step?) into start, stop, step as
   integers, if each is a Lua integer or a float of integral value in int64 range. */
static bool arange_integers(lua_State *L, int n, int64_t *start, int64_t *stop, int64_t *step) {
    lua_Integer v[3] = {0, 0, 1};
    for (int i = 1; i <= n; i++) {
        int ok;
        v[n == 1 ? 1 : i - 1] = lua_tointegerx(L, i, &ok);
        if (!ok) return false;
    }
    *start = v[0], *stop = v[1], *step = v[2];
    return true;
}

/* tl.arange(stop) / tl.arange(start, stop, step?, opts?): int64 when every number is a Lua
   integer, else float32, unless opts.dtype says. Integer arguments (Lua integers, or integral
   floats with an int32/int64 dtype) are computed exactly in int64, others in double. */
static int ctor_arange(lua_State *L) {
    int top = lua_gettop(L), n = 0;
    while (n < top && n < 3 && lua_type(L, n + 1) == LUA_TNUMBER) n++;
    if (n == 0) return tlb_type_error(L, 1, "arange", "a number");
    bool all_integers = true;
    for (int i = 1; i <= n; i++) all_integers = all_integers && lua_isinteger(L, i);
    if (n + 1 <= top && !lua_istable(L, n + 1) && !lua_isnil(L, n + 1))
        return tlb_type_error(L, n + 1, "arange", "a number or an options table");
    tlb_options o = default_options();
    o.dtype = all_integers ? TL_I64 : TL_F32;
    tlb_options_parse(L, n + 1, "arange", &o);
    bool integer_dtype = o.dtype == TL_I32 || o.dtype == TL_I64;
    int64_t istart, istop, istep;
    bool exact = (all_integers || integer_dtype) && arange_integers(L, n, &istart, &istop, &istep);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status;
    if (exact) {
        status = tl_arange_int(istart, istop, istep, o.dtype, o.device, &out);
    } else {
        double start = 0, stop, step = 1;
        if (n == 1)
            stop = lua_tonumber(L, 1);
        else {
            start = lua_tonumber(L, 1);
            stop = lua_tonumber(L, 2);
            if (n == 3) step = lua_tonumber(L, 3);
        }
        status = tl_arange(start, stop, step, o.dtype, o.device, &out);
    }
    return finish(L, box, status, out, &o, "arange");
}

/* tl.linspace(start, stop, steps, opts?) */
static int ctor_linspace(lua_State *L) {
    double start = tlb_check_number(L, 1, "linspace", "start");
    double stop = tlb_check_number(L, 2, "linspace", "stop");
    int64_t steps = tlb_check_int(L, 3, "linspace", "steps");
    tlb_options o = default_options();
    tlb_options_parse(L, 4, "linspace", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = tl_linspace(start, stop, steps, o.dtype, o.device, &out);
    return finish(L, box, status, out, &o, "linspace");
}

/* tl.eye(n, m?, opts?) */
static int ctor_eye(lua_State *L) {
    int64_t n = tlb_check_int(L, 1, "eye", "n"), m = n;
    int opts_index = 2;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        m = tlb_check_int(L, 2, "eye", "m");
        opts_index = 3;
    }
    tlb_options o = default_options();
    tlb_options_parse(L, opts_index, "eye", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = tl_eye(n, m, o.dtype, o.device, &out);
    return finish(L, box, status, out, &o, "eye");
}

/* tl.randint(low, high, shape, opts?) or tl.randint(high, shape, opts?): int64 by default */
static int ctor_randint(lua_State *L) {
    int64_t low = 0, high, shape[TL_MAX_DIMS];
    int shape_index;
    if (lua_istable(L, 2)) {
        high = tlb_check_int(L, 1, "randint", "high");
        shape_index = 2;
    } else {
        low = tlb_check_int(L, 1, "randint", "low");
        high = tlb_check_int(L, 2, "randint", "high");
        shape_index = 3;
    }
    int ndim = shape_at(L, shape_index, "randint", shape);
    check_sizes(L, "randint", shape, ndim);
    tlb_options o = default_options();
    o.dtype = TL_I64;
    tlb_options_parse(L, shape_index + 1, "randint", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = tl_randint(low, high, shape, ndim, o.dtype, o.device, &out);
    return finish(L, box, status, out, &o, "randint");
}

tl_status tlb_one_based(const tl_tensor *indices, tl_tensor **out) {
    tl_tensor *one = NULL;
    tl_status status = tl_scalar_tensor(tl_scalar_int(1), indices, &one);
    if (status == TL_OK) status = tl_add(indices, one, out);
    tl_release(one);
    return status;
}

/* tl.randperm(n, opts?): a permutation of 1..n */
static int ctor_randperm(lua_State *L) {
    int64_t n = tlb_check_int(L, 1, "randperm", "n");
    tlb_options o = default_options();
    o.dtype = TL_I64;
    tlb_options_parse(L, 2, "randperm", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *perm = NULL, *out = NULL;
    tl_status status = tl_randperm(n, o.dtype, o.device, &perm);
    if (status == TL_OK) {
        status = tlb_one_based(perm, &out);
        tl_release(perm);
    }
    return finish(L, box, status, out, &o, "randperm");
}

/* tl.zeros_like(t, opts?) and friends: t's shape, dtype and device unless opts say */
static int like_ctor(lua_State *L, const char *op, enum ctor_kind kind) {
    tl_tensor *like = tlb_check(L, 1, op);
    tlb_options o = {.dtype = like->dtype, .device = tl_tensor_device(like), .requires_grad = -1};
    tlb_options_parse(L, 2, op, &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = make(kind, like->shape, like->ndim, &o, &out);
    return finish(L, box, status, out, &o, op);
}

static int ctor_zeros_like(lua_State *L) {
    return like_ctor(L, "zeros_like", CTOR_ZEROS);
}
static int ctor_ones_like(lua_State *L) {
    return like_ctor(L, "ones_like", CTOR_ONES);
}
static int ctor_empty_like(lua_State *L) {
    return like_ctor(L, "empty_like", CTOR_EMPTY);
}
static int ctor_rand_like(lua_State *L) {
    return like_ctor(L, "rand_like", CTOR_RAND);
}
static int ctor_randn_like(lua_State *L) {
    return like_ctor(L, "randn_like", CTOR_RANDN);
}

static int ctor_full_like(lua_State *L) {
    tl_tensor *like = tlb_check(L, 1, "full_like");
    tl_scalar value = tlb_check_scalar(L, 2, "full_like");
    tlb_options o = {.dtype = like->dtype, .device = tl_tensor_device(like), .requires_grad = -1};
    tlb_options_parse(L, 3, "full_like", &o);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status = tl_full(like->shape, like->ndim, value, o.dtype, o.device, &out);
    return finish(L, box, status, out, &o, "full_like");
}

const luaL_Reg tlb_constructor_functions[] = {
    {"tensor", tlb_tensor_ctor},
    {"zeros", ctor_zeros},
    {"ones", ctor_ones},
    {"empty", ctor_empty},
    {"full", ctor_full},
    {"arange", ctor_arange},
    {"linspace", ctor_linspace},
    {"eye", ctor_eye},
    {"rand", ctor_rand},
    {"randn", ctor_randn},
    {"randint", ctor_randint},
    {"randperm", ctor_randperm},
    {"zeros_like", ctor_zeros_like},
    {"ones_like", ctor_ones_like},
    {"empty_like", ctor_empty_like},
    {"full_like", ctor_full_like},
    {"rand_like", ctor_rand_like},
    {"randn_like", ctor_randn_like},
    {NULL, NULL},
};
