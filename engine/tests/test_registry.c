/* C unit test of the kernel registry's checks: a table with an entry whose signature does not fit
   its op's family, or a second kernel for one (op, device, dtype), breaks the registry with a
   message naming the bad entry, and every dispatch then fails with it (no abort); the build's
   tables, listed at configure time, give every op with kernels a CPU kernel. */
#include <stdio.h>
#include <string.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "tlua/dtype.h"

#include "check.h"

static tl_status fake_unary(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    (void)out, (void)in, (void)args;
    return TL_OK;
}

static tl_status fake_binary(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                             const tl_op_args *args) {
    (void)out, (void)a, (void)b, (void)args;
    return TL_OK;
}

/* add is of family BINARY: a unary kernel for it does not fit */
static const tl_kernel_entry wrong_signature[] = {
    TL_KERNEL(neg, TL_DTYPES_FLOATING, unary, fake_unary),
    TL_KERNEL(add, TL_DTYPES_F32, unary, fake_unary),
};
static TL_KERNEL_TABLE(wrong_signature_table, TL_DEVICE_CPU, wrong_signature);

/* mul in f64 twice: once in the set, once alone */
static const tl_kernel_entry duplicate[] = {
    TL_KERNEL(mul, TL_DTYPES_FLOATING, binary, fake_binary),
    TL_KERNEL(mul, TL_DTYPES_F64, binary, fake_binary),
};
static TL_KERNEL_TABLE(duplicate_table, TL_DEVICE_CPU, duplicate);

static const tl_kernel_entry sound[] = {
    TL_KERNEL(neg, TL_DTYPES_FLOATING | TL_DTYPES_I32, unary, fake_unary),
    TL_KERNEL(mul, TL_DTYPES_FLOATING, binary, fake_binary),
};
static TL_KERNEL_TABLE(sound_table, TL_DEVICE_CPU, sound);

/* dispatching neg in f32 fails, and the message names want (the bad entry) */
static void expect_broken(const char *want) {
    const char *problem = tl_registry_problem();
    CHECK(problem && strstr(problem, want), "registry problem '%s', expected one naming %s",
          problem ? problem : "(none)", want);
    const tl_kernel_entry *k = tl_dispatch(TL_OP_neg, TL_CPU, TL_F32, NULL);
    CHECK(k == NULL, "dispatch through a broken registry found a kernel");
    CHECK(strstr(tl_last_error(), "kernel registry") && strstr(tl_last_error(), want),
          "dispatch error '%s', expected one naming %s", tl_last_error(), want);
    CHECK(!tl_has_kernel(TL_OP_neg, TL_DEVICE_CPU, TL_F32), "a broken registry has kernels");
}

int main(void) {
    /* the build's own tables are sound */
    CHECK(tl_registry_problem() == NULL, "the build's tables: %s", tl_registry_problem());
    /* every family (ops.def's FAMILY rows) has a name and a named signature, and the generated
       list of tables (kernel_tables.h) leaves no op of a family with kernels without a CPU one
       (but the DEVICE_ONLY families') */
    for (int f = 0; f < TL_FAMILY_COUNT; f++) {
        tl_kernel_signature sig = tl_family_signature((tl_op_family)f);
        CHECK(strcmp(tl_op_family_name((tl_op_family)f), "unknown") &&
                  strcmp(tl_signature_name(sig), "unknown"),
              "family %d: name %s, signature %s", f, tl_op_family_name((tl_op_family)f),
              tl_signature_name(sig));
    }
    for (int op = 0; op < TL_OP_COUNT; op++) {
        const tl_op_info *info = tl_op_info_of((tl_op)op);
        if (tl_family_signature(info->family) == TL_SIG_none || tl_family_device_only(info->family))
            continue;
        bool any = false;
        for (int d = 0; d < TL_DTYPE_COUNT; d++)
            any = any || tl_has_kernel((tl_op)op, TL_DEVICE_CPU, (tl_dtype)d);
        CHECK(any, "op %s (family %s) has no CPU kernel: is its table listed?", info->name,
              info->family_name);
    }

    const tl_kernel_table *bad_signature[] = {&wrong_signature_table};
    tl_registry_use_tables(bad_signature, 1);
    expect_broken("cpu_add");
    CHECK(strstr(tl_registry_problem(), "unary") && strstr(tl_registry_problem(), "binary"),
          "the message says which signature: %s", tl_registry_problem());

    const tl_kernel_table *twice[] = {&duplicate_table};
    tl_registry_use_tables(twice, 1);
    expect_broken("cpu_mul_f64");

    /* a sound table: one entry per dtype set, names made per dtype */
    const tl_kernel_table *good[] = {&sound_table};
    tl_registry_use_tables(good, 1);
    CHECK(tl_registry_problem() == NULL, "sound table rejected: %s", tl_registry_problem());
    const tl_kernel_entry *k = tl_dispatch(TL_OP_neg, TL_CPU, TL_I32, NULL);
    CHECK(k && k->fn.unary == fake_unary && k->dtype == TL_I32 && !strcmp(k->name, "cpu_neg_i32"),
          "neg i32: %s", k ? k->name : tl_last_error());
    CHECK(!tl_has_kernel(TL_OP_neg, TL_DEVICE_CPU, TL_I64), "neg i64 is not in the set");

    tl_registry_use_tables(NULL, 0); /* back to the build's tables */
    CHECK(tl_registry_problem() == NULL && tl_has_kernel(TL_OP_add, TL_DEVICE_CPU, TL_BF16),
          "the build's tables after the test: %s", tl_registry_problem());

    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
