/* Internal header of the Lua binding (tlua.core): tensor box, argument helpers, registration. */
#ifndef TLUA_BINDING_H
#define TLUA_BINDING_H

#include <stdbool.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "tlua/autograd.h"
#include "tlua/tlua.h"

#define TLB_TENSOR_NAME "tlua.Tensor"

/* The module's entry point (require "tlua.core"; preloaded by the tlua executable). */
int luaopen_tlua_core(lua_State *L);

/* ---- setup.c: a new state of the tlua executable or of the embedding library ----------------
   The folder of tlua's Lua modules (the one holding tlua/init.lua) for the binary that holds
   `symbol` (the executable when NULL): <binary dir>/../bindings/lua (a build folder of the source
   tree), the installed share/lua/5.4 relative to bin/ or lib/, then the configured install
   folder. Written into dir; NULL when none is found. */
const char *tlb_module_dir(const void *symbol, char *dir, size_t size);
/* Preloads tlua.core and puts tlua's Lua modules first on package.path: $TLUA_LUA_PATH (a folder
   or a path template; unless ignore_env), else tlb_module_dir(symbol). Needs the package library.
 */
void tlb_prepare_state(lua_State *L, const void *symbol, bool ignore_env);
/* A lua_CFunction: tl = require("tlua") (call it protected, with a message handler). */
int tlb_open_tl(lua_State *L);
/* A message handler for lua_pcall: the message (or the error object's __tostring) followed by
   a traceback, as the stock lua interpreter prints them. */
int tlb_traceback(lua_State *L);

/* Every C function of the module carries the tensor metatable as upvalue 1:
   type checks and new tensors use it without a lookup by name. */
#define TLB_MT lua_upvalueindex(1)

/* ---- args.c: errors and arguments (no tensor box: the box's code builds on these) ------------
   Messages name the op, the argument and expected vs got. */
/* luaL_error with printf formats (%lld, %g, ...): position, then the message. */
int tlb_errorf(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Raises "op: argument N expected <what>, got <type>". */
int tlb_type_error(lua_State *L, int idx, const char *op, const char *what);
/* Raises the engine's last error as a Lua error (with position). */
int tlb_fail(lua_State *L);
/* The type name used in messages (__name for objects with one). */
const char *tlb_typename(lua_State *L, int idx);

/* Parses a shape from the arguments at first..top: integers as varargs or one
   table, then an optional options table (or nil). Writes the dims into shape
   (TL_MAX_DIMS entries) and returns ndim; *opts gets the options table index
   (0 when none; a lone table with keys but no array part is options, {} a 0-dim shape). */
int tlb_shape_args(lua_State *L, int first, const char *op, int64_t *shape, int *opts_index);
/* Reads a shape from the table at idx. */
int tlb_shape_table(lua_State *L, int idx, const char *op, int64_t *shape);
/* A pair of sizes at idx (what names it in messages): an integer (both) or a table {h, w}. */
void tlb_check_pair(lua_State *L, int idx, const char *op, const char *what, int64_t out[2]);
tl_dtype tlb_check_dtype(lua_State *L, int idx, const char *op);
tl_device tlb_check_device(lua_State *L, int idx, const char *op);
/* A 1-based Lua dim (negative from the end) as the C API's dim: 0-based, or
   negative from the end, which the engine resolves. */
int tlb_check_dim(lua_State *L, int idx, const char *op);
int tlb_opt_dim(lua_State *L, int idx, const char *op, int def_c_dim);
/* A 1-based Lua index (negative from the end) as the C API's index: 0-based,
   or negative from the end. */
int64_t tlb_check_index(lua_State *L, int idx, const char *op);
/* The number of the argument at stack index idx as luaL_argerror counts it:
   idx, less one when the running function was called as a method (t:op(x):
   x is argument 1; 0 is self). */
int tlb_arg_number(lua_State *L, int idx);
/* The same for a C function called by a Lua function of tlua's modules that passed its own
   arguments through unchanged (Tensor.register_hook(t, fn) calling core._add_grad_hook(t, fn)):
   counted as the user called that Lua function, less one when it was called as a method. */
int tlb_wrapper_arg_number(lua_State *L, int idx);
/* "argument N" (or "argument N (what)") for an argument, N as tlb_arg_number
   counts ("self" for the object of a method call); what (or "a value") for a
   relative index: a value read from a table, such as an option. */
const char *tlb_position(lua_State *L, int idx, const char *what, char *buf, size_t size);
/* An integer argument (floats with an integral value accepted). */
int64_t tlb_check_int(lua_State *L, int idx, const char *op, const char *what);
double tlb_check_number(lua_State *L, int idx, const char *op, const char *what);
/* A function or a value with __call. */
bool tlb_is_callable(lua_State *L, int idx);
/* A number or boolean as a scalar, respecting math.type. */
bool tlb_to_scalar(lua_State *L, int idx, tl_scalar *out);
tl_scalar tlb_check_scalar(lua_State *L, int idx, const char *op);
bool tlb_opt_bool(lua_State *L, int idx, const char *op, bool def);
/* Pushes a scalar as a Lua value of the kind dtype asks for. */
void tlb_push_scalar(lua_State *L, tl_scalar s, tl_dtype dtype);
/* Pushes t's shape as a new Lua table. */
void tlb_push_shape(lua_State *L, const tl_tensor *t);
/* A counter of a C struct of uint64_t counters, pushed by tlb_push_counters as a field. */
typedef struct tlb_counter {
    const char *name;
    size_t offset; /* offsetof the uint64_t in the struct */
} tlb_counter;
/* Pushes a table {name = value, ...} of the counters of the struct at stats. */
void tlb_push_counters(lua_State *L, const void *stats, const tlb_counter *counters, int count);
/* Pushes a metatable whose __close and __gc are both release (a guard object's). */
void tlb_push_guard_metatable(lua_State *L, lua_CFunction release);

/* ---- tensor_object.c: the userdata box (uses args.c, never the other way round) -------------
   A tensor userdata is a box holding one reference (NULL once released). */
typedef struct tlb_box {
    tl_tensor *tensor;
} tlb_box;

/* Pushes a new, empty box with the tensor metatable; fill box->tensor with a
   new reference right away (an empty box is harmless to the collector). */
tlb_box *tlb_newbox(lua_State *L);
/* Lets the garbage collector know about the memory a new tensor holds
   outside the Lua heap. */
void tlb_account(lua_State *L, const tl_tensor *t);
/* Finishes a C call that made out: raises the engine's error when status
   failed (out is then not touched: a failing op may have released it), else
   puts out into box (pushed before the call) and returns 1. */
static inline int tlb_result(lua_State *L, tlb_box *box, tl_status status, tl_tensor *out) {
    if (status != TL_OK) return tlb_fail(L);
    box->tensor = out;
    tlb_account(L, out);
    return 1;
}
/* The tensor at idx, or an error "op: argument N expected a tensor, got T". */
tl_tensor *tlb_check(lua_State *L, int idx, const char *op);
/* The tensor at idx, or NULL when the value is not a tensor (a closed tensor
   is an error naming op). */
tl_tensor *tlb_totensor(lua_State *L, int idx, const char *op);
/* The tensor at idx, NULL for nil or none; anything else raises "op: <position of what> expected
   a tensor or nil". */
tl_tensor *tlb_opt_tensor(lua_State *L, int idx, const char *op, const char *what);
/* True when the value at idx is a tensor object (open or closed). */
bool tlb_is_tensor(lua_State *L, int idx);
/* The length of the list of tensors at idx (a table, not a tensor; the argument named what), at
   most 2^20; anything else raises naming op. */
size_t tlb_check_list_length(lua_State *L, int idx, const char *op, const char *what);
/* The tensors of that list, in scratch memory the collector owns; *count their number. Anything
   but a tensor in it raises "op: what[i] expected a tensor, got ...". */
tl_tensor **tlb_check_tensor_list(lua_State *L, int idx, const char *op, const char *what,
                                  int *count);
/* For C code that runs outside the module's functions (the embedding library), where TLB_MT is
   not at hand: the tensor metatable comes from the registry (tlua.core must be loaded, else a
   Lua error). Pushes a tensor object holding a new reference to t. */
void tlb_push_tensor(lua_State *L, tl_tensor *t);
/* The tensor of the tensor object at idx; NULL when the value is not one or was released. */
tl_tensor *tlb_peek_tensor(lua_State *L, int idx);

/* ---- indices.c: index tensors counted from 1 in Lua ---------------------------------------------
   The indices (int64 or int32; the Lua argument named what) as a new tensor counting from 0, the C
   API's way. Where range_of names what they index, their values are first checked to lie in
   1..count (an error in Lua's terms: 1-based values and positions; on CUDA queued like the op,
   raised by the next synchronization). Raises on a wrong dtype or a failed check. */
tl_tensor *tlb_zero_based_indices(lua_State *L, const char *op, const char *what,
                                  const tl_tensor *indices, const char *range_of, int64_t count);
/* Its pieces: the dtype check (raises), the 1..count check, and indices - 1 as a new tensor. */
void tlb_check_index_dtype(lua_State *L, const char *op, const char *what,
                           const tl_tensor *indices);
tl_status tlb_check_one_based(const tl_tensor *indices, const char *op, const char *what,
                              const char *range_of, int64_t count);
tl_status tlb_zero_based(const tl_tensor *indices, tl_tensor **out);
/* The index argument at idx of an index op (1-based positions) as a view that counts from 1
   (tl_index_view), which the op checks. Raises. */
tl_tensor *tlb_index_arg(lua_State *L, const char *op, int idx);
/* The same, checked here against 1..count (range_of: what count is), so that errors name op. */
tl_tensor *tlb_index_arg_checked(lua_State *L, const char *op, int idx, const char *range_of,
                                 int64_t count);

/* ---- options.c: options tables (uses args.c and the box) ---------------------------------------
   Every binding function that takes an options table checks it with tlb_check_options against
   the keys it accepts, each with its kind, then reads it with the typed getters:

     static const tlb_option accepted[] = {
         {"causal", TLB_OPTION_BOOLEAN}, {"scale", TLB_OPTION_NUMBER}, {NULL, 0}};
     if (tlb_check_options(L, 4, op, accepted)) tlb_option_bool(L, 4, op, "causal", &causal);

   An unknown key raises "op: unknown option 'casual' (accepted: causal, scale)", a value of
   another kind "op: option causal expected a boolean, got number". */
typedef enum tlb_option_kind {
    TLB_OPTION_BOOLEAN,
    TLB_OPTION_NUMBER,
    TLB_OPTION_INTEGER, /* a float of integral value too */
    TLB_OPTION_STRING,
    TLB_OPTION_DTYPE,  /* a dtype's name: "float32", ... */
    TLB_OPTION_DEVICE, /* "cpu", "cuda", "cuda:N" */
    TLB_OPTION_TENSOR,
    TLB_OPTION_PAIR, /* an integer or a table {h, w} (tlb_check_pair) */
} tlb_option_kind;
typedef struct tlb_option {
    const char *name;
    tlb_option_kind kind;
} tlb_option;
/* Checks the value at idx: none, nil or a 0 idx (no options: false), else a table (true) whose
   every key is the name of one of accepted (a list ending with {NULL, 0}) and every value of
   that option's kind; raises otherwise, naming op, the key and the accepted names. */
bool tlb_check_options(lua_State *L, int idx, const char *op, const tlb_option *accepted);
/* Typed getters of option name of the options table at idx (none, nil or 0: no options): true
   and *out set when the option is given, false and *out untouched when not; a value of another
   kind raises as tlb_check_options does. Strings and tensors live as long as the table. */
bool tlb_option_bool(lua_State *L, int idx, const char *op, const char *name, bool *out);
bool tlb_option_number(lua_State *L, int idx, const char *op, const char *name, double *out);
bool tlb_option_integer(lua_State *L, int idx, const char *op, const char *name, int64_t *out);
bool tlb_option_string(lua_State *L, int idx, const char *op, const char *name, const char **out);
bool tlb_option_dtype(lua_State *L, int idx, const char *op, const char *name, tl_dtype *out);
bool tlb_option_device(lua_State *L, int idx, const char *op, const char *name, tl_device *out);
bool tlb_option_tensor(lua_State *L, int idx, const char *op, const char *name, tl_tensor **out);
bool tlb_option_pair(lua_State *L, int idx, const char *op, const char *name, int64_t out[2]);
/* The numbers of a pointwise op whose row names them in spec ("min_val=-1 max_val=1"), from
   Lua arguments first..top: positionally (nil: the default) or one options table keyed by their
   names; numbers[i] NaN where not given (the row's default). Raises on too many arguments or an
   unknown key. */
#define TLB_MAX_NUMBERS 3
void tlb_pointwise_numbers(lua_State *L, int first, const char *op, const char *spec,
                           double numbers[TLB_MAX_NUMBERS]);
/* The {alpha = x} of add and sub and their in-place forms (a + alpha * b), read from argument 3
   and popped: raises on more arguments than (operands, {alpha}), naming op. A number second
   operand is scaled in place on the stack; the factor left for a tensor one is returned (1:
   nothing to scale). */
double tlb_alpha_option(lua_State *L, const char *op, const char *operands);
/* A new tensor's options: {dtype, device, requires_grad} (constructors, tl.tensor). */
extern const tlb_option tlb_new_tensor_options[];
typedef struct tlb_options {
    tl_dtype dtype;
    tl_device device;
    bool has_dtype, has_device;
    int requires_grad; /* -1 unset, 0 or 1 */
} tlb_options;
/* tlb_new_tensor_options at idx (a table, nil or none) into opts, which holds the defaults. */
void tlb_options_parse(lua_State *L, int idx, const char *op, tlb_options *opts);
/* Applies opts.requires_grad to a new tensor (raises on failure). */
void tlb_apply_requires_grad(lua_State *L, tl_tensor *t, const tlb_options *opts);

/* ---- registration: each file exports its functions --------------------------
   methods: available as t:name(...) and tl.name(t, ...);
   functions: tl.name(...) only;
   meta: entries of the tensor metatable. */
extern const luaL_Reg tlb_constructor_functions[];
extern const luaL_Reg tlb_view_methods[];
extern const luaL_Reg tlb_op_methods[];
extern const luaL_Reg tlb_op_meta[];
extern const luaL_Reg tlb_grouped_functions[];
extern const luaL_Reg tlb_block_sparse_functions[]; /* block_sparse.c */
extern const luaL_Reg tlb_attention_functions[];    /* attention.c */
extern const luaL_Reg tlb_inplace_methods[];        /* inplace.c: t:add_(x), t:softmax_(dim), ... */
/* scan.c: t:cumsum(dim), t:nonzero() */
extern const luaL_Reg tlb_scan_methods[];
/* shapes.c: t:tril(k), t:flip(dims), t:pad(pads, options), t:diagonal(...), ... */
extern const luaL_Reg tlb_shape_methods[];
extern const luaL_Reg tlb_sort_methods[]; /* sort.c: sort, topk, ..., searchsorted, bincount */
extern const luaL_Reg tlb_nn_methods[];   /* nn_ops.c: add_layer_norm */
extern const luaL_Reg tlb_autograd_methods[];
extern const luaL_Reg tlb_autograd_functions[];
extern const luaL_Reg tlb_runtime_functions[];
extern const luaL_Reg tlb_cuda_functions[]; /* cuda.c: tl._cuda_* (tl.cuda in tlua/cuda.lua) */
extern const luaL_Reg tlb_meta_methods[];
extern const luaL_Reg tlb_object_functions[];
extern const luaL_Reg tlb_nn_functions[], tlb_io_functions[]; /* nn_ops.c, io.c */
extern const luaL_Reg tlb_pool_functions[];                   /* pool_ops.c */
extern const luaL_Reg tlb_lifetime_meta[];

/* metamethods.c: __index (needs the methods table as upvalue 2) */
int tlb_meta_index(lua_State *L);
/* print.c */
int tlb_tostring(lua_State *L);
/* constructors.c: indices + 1 (0-based -> 1-based) as a new tensor */
tl_status tlb_one_based(const tl_tensor *indices, tl_tensor **out);
/* nested.c */
int tlb_tensor_ctor(lua_State *L);
int tlb_totable(lua_State *L);
/* fields: t.name for these names (metamethods.c dispatches) */
int tlb_field_requires_grad(lua_State *L);
int tlb_field_grad(lua_State *L);
int tlb_field_grad_fn(lua_State *L);
int tlb_field_is_leaf(lua_State *L);
void tlb_set_requires_grad_field(lua_State *L, tl_tensor *t, int value_idx);
void tlb_set_grad_field(lua_State *L, tl_tensor *t, int value_idx);
/* autograd.c: module-level setup (the backward callback of custom functions) */
void tlb_autograd_init(lua_State *L, int mt);
/* The Lua thread running the current backward (NULL when none runs). */
lua_State *tlb_backward_state(void);
/* ---- grants.c: what a sandboxed state may touch outside itself ---------------------------------
   A state restricted by tlb_restrict (the embedding sandbox) opens files only inside the folders
   granted to it (real paths, links followed: a link out of a folder leads nowhere) and sockets
   only with the network granted; a state never restricted may do anything. */
void tlb_restrict(lua_State *L, const char *const *read_dirs, const char *const *write_dirs,
                  bool network);
bool tlb_is_restricted(lua_State *L);
/* Whether the state may "read" files (some folder granted), "write" them, use the "network". */
bool tlb_may(lua_State *L, const char *what);
/* The path (a string at idx) that op may open for reading (mode 'r': a file inside a readable or
   writable folder) or writing ('w': inside a writable folder); it replaces the value at idx by
   the resolved path and returns it. Raises (the same message whether the file exists or not)
   otherwise. Unrestricted states get the path as given. */
const char *tlb_check_file(lua_State *L, int idx, char mode, const char *op);
/* Whether a file at path can be opened for reading (false outside a restricted state's folders,
   whatever lies there). */
bool tlb_file_readable(lua_State *L, const char *path);
/* Raises unless the state may use the network. */
void tlb_check_network(lua_State *L, const char *op);
/* Raises in a restricted state: op changes a setting of the whole process (the CUDA device). */
void tlb_check_process(lua_State *L, const char *op);

/* ---- anchor.c: what C objects that outlive a call keep of their Lua state -------------------
   An anchor is made when tlua.core loads into a state and says which state (an id: 1, 2, ... in
   the order states loaded tlua.core) and whether it is still open; it outlives the state while
   references to it remain. Callbacks keep an anchor, never a lua_State address (another state
   may get the same address once one is closed). */
typedef struct tlb_anchor tlb_anchor;
/* Makes L's anchor (once per state: tlua.core's first load). */
void tlb_anchor_init(lua_State *L);
/* L's anchor with a new reference (NULL when tlua.core never loaded there). */
tlb_anchor *tlb_anchor_of(lua_State *L);
void tlb_anchor_release(tlb_anchor *a);
/* The anchor's main thread while its state is open, else NULL. */
lua_State *tlb_anchor_state(const tlb_anchor *a);
uint64_t tlb_anchor_id(const tlb_anchor *a);
/* True when a is the anchor of L's state (which is then open). */
bool tlb_anchor_is(const tlb_anchor *a, lua_State *L);
/* TL_OK when what (a custom function, a hook) belongs to the state of L, which runs a backward;
   else TL_ERR_AUTOGRAD naming both states (or saying a's state is closed, or that no backward
   runs from Lua when L is NULL). */
tl_status tlb_anchor_check(const tlb_anchor *a, lua_State *L, const char *what);
/* grad_hooks.c: registry entries of the hooks; the callbacks queued during a backward, run by
   the outermost one when it ends (only when ok; always emptied) */
void tlb_grad_hooks_init(lua_State *L, int mt);
void tlb_run_backward_callbacks(lua_State *L, bool ok);
extern const luaL_Reg tlb_grad_hook_functions[];
/* distributed.c: tl.distributed's process group, store and collectives */
extern const luaL_Reg tlb_distributed_functions[];

#endif
