/* C unit test of states side by side: autograd callbacks (custom Functions, grad-ready hooks)
   belong to the state that recorded them, whatever states open and close around them. */
#include "embed_support.h"

#include "tlua/runtime.h"

/* A custom Function in the state: y = x^3 (backward 3 x^2 g), saving x. */
static const char cube[] =
    "Cube = tl.autograd.Function {\n"
    "  name = 'Cube',\n"
    "  forward = function(ctx, x) ctx:save_for_backward(x); return x * x * x end,\n"
    "  backward = function(ctx, g) local x = ctx.saved_tensors[1]\n"
    "    return x * x * g * 3 end,\n"
    "}\n"
    "function make(v) local x = tl.full({1}, v:item(), {dtype = 'float64',\n"
    "  requires_grad = true}); return Cube(x), x end\n";

/* y = x^2 (Square), y = 7 x (Sevenfold): two Functions with registry references of their own. */
static const char square_and_tenfold[] =
    "Square = tl.autograd.Function { name = 'Square',\n"
    "  forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,\n"
    "  backward = function(ctx, g) return ctx.saved_tensors[1] * g * 2 end }\n"
    "Sevenfold = tl.autograd.Function { name = 'Sevenfold',\n"
    "  forward = function(ctx, x) return x * 7 end,\n"
    "  backward = function(ctx, g) return g * 7 end }\n"
    "function backward_of(t) t:sum():backward() return t end\n";

static tl_tensor *scalar(double v) {
    tl_tensor *t = NULL;
    int64_t shape[1] = {1};
    OK(tl_full(shape, 1, tl_scalar_float(v), TL_F64, TL_CPU, &t));
    return t;
}

/* A state's custom Functions free what they saved once their graph is gone, while another state
   is open (the state opened last used to be the only one whose callbacks were released). */
static void test_no_leak_beside_another_state(void) {
    tl_lua *A = open_state(false, 0, 0), *B = open_state(false, 0, 0);
    if (!A || !B) goto done;
    run_ok(A, "=define",
           "Keep = tl.autograd.Function { name = 'Keep',\n"
           "  forward = function(ctx, x) ctx:save_for_backward(x * 1); return x * 2 end,\n"
           "  backward = function(ctx, g) return g * 2 end }\n"
           "function steps(n) for i = 1, n do\n"
           "  local w = tl.ones(131072, {requires_grad = true}) -- 512 KiB saved per step\n"
           "  Keep(w):sum():backward() end\n"
           "  collectgarbage(); collectgarbage() end");
    run_ok(A, "=warm", "steps(2)");
    tl_cpu_memory_stats before, after;
    tl_cpu_get_memory_stats(&before);
    run_ok(A, "=steps", "steps(24)");
    tl_cpu_get_memory_stats(&after);
    CHECK(after.allocated_bytes <= before.allocated_bytes + (1u << 19),
          "24 steps of a custom Function in the first of two states kept %llu bytes",
          (unsigned long long)(after.allocated_bytes - before.allocated_bytes));
done:
    tl_lua_close(B);
    tl_lua_close(A);
}

/* A tensor recorded in A and released after A closed touches nothing of B (which may have A's
   address): B's own Functions keep their backward. */
static void test_release_after_close(void) {
    tl_lua *A = open_state(false, 0, 0);
    if (!A) return;
    run_ok(A, "=cube", cube);
    tl_tensor *v = scalar(2), *out[2] = {NULL, NULL};
    OK(tl_lua_call(A, "make", &v, 1, out, 2));
    tl_lua_close(A);
    tl_lua *B = open_state(false, 0, 0);
    if (B) {
        run_ok(B, "=define", square_and_tenfold);
        run_ok(B, "=record",
               "w = tl.full({1}, 5.0, {dtype = 'float64', requires_grad = true})\n"
               "y = Square(w)");
        tl_release(out[0]); /* A's Cube node: its release must not reach into B */
        out[0] = NULL;
        run_ok(B, "=more", "z = Sevenfold(w); collectgarbage()");
        run_ok(B, "=backward",
               "y:backward()\n"
               "assert(w.grad:item() == 10, 'd(w^2)/dw at 5 is 10, got ' .. "
               "w.grad:item())");
        tl_lua_close(B);
    }
    tl_release(out[1]);
    tl_release(v);
}

/* A graph recorded in one state and differentiated in another is an error that names both
   states (A open), or says A is closed; nothing of A's runs in B. */
static void test_backward_in_another_state(void) {
    tl_lua *A = open_state(false, 0, 0), *B = open_state(false, 0, 0);
    tl_tensor *v = scalar(3), *out[2] = {NULL, NULL}, *later[2] = {NULL, NULL}, *back = NULL;
    if (!A || !B) goto done;
    run_ok(A, "=cube", cube);
    run_ok(B, "=define", square_and_tenfold);
    OK(tl_lua_call(A, "make", &v, 1, out, 2));
    OK(tl_lua_call(A, "make", &v, 1, later, 2));
    ERROR("A's Cube differentiated in B (A open)", tl_lua_call(B, "backward_of", out, 1, &back, 1),
          TL_ERR_RUNTIME, "the custom function 'Cube' belongs to Lua state", "not to Lua state");
    CHECK(tl_grad(out[1]) == NULL, "nothing reached A's leaf");
    tl_lua_close(A);
    A = NULL;
    ERROR("A's Cube differentiated in B (A closed)",
          tl_lua_call(B, "backward_of", later, 1, &back, 1), TL_ERR_RUNTIME,
          "the custom function 'Cube' belongs to Lua state", "which is closed");
    check_usable(B, "a graph of another state");
    /* a grad-ready hook of a closed state: an error too, not a call into B */
    tl_lua *C = open_state(false, 0, 0);
    tl_tensor *hooked[1] = {NULL};
    if (C) {
        run_ok(C, "=hook",
               "fired = 0\n"
               "function hooked(x) x:requires_grad_(true)\n"
               "  tl.autograd.set_grad_ready_hook(x, function() fired = fired + 1 end)\n"
               "  return x end");
        tl_tensor *leaf = scalar(4);
        OK(tl_lua_call(C, "hooked", &leaf, 1, hooked, 1));
        tl_release(leaf);
        tl_lua_close(C);
        ERROR("a hook of a closed state", tl_lua_call(B, "backward_of", hooked, 1, &back, 1),
              TL_ERR_RUNTIME, "grad-ready hook", "which is closed");
        tl_release(hooked[0]);
    }
done:
    for (int i = 0; i < 2; i++) {
        tl_release(out[i]);
        tl_release(later[i]);
    }
    tl_release(back);
    tl_release(v);
    tl_lua_close(B);
    tl_lua_close(A);
}

int main(void) {
    if (!make_run_dir("tlua_test_embed_states")) return 1;
    test_no_leak_beside_another_state();
    test_release_after_close();
    test_backward_in_another_state();
    return finish("test_embed_states");
}
