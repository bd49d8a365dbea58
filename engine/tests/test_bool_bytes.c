/* Bool storage holding bytes other than 0 and 1 (as a C host may write them): every read is "byte
 * != 0", no UB. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "tlua/ops.h"
#include "tlua/tlua.h"

enum { N = 3001 };

/* byte k: 0, 2 or 255 in turn, so two of every three are true */
static uint8_t byte_at(int64_t k) {
    return (uint8_t)(k % 3 == 0 ? 0 : k % 3 == 1 ? 2 : 255);
}

static int64_t true_count(void) {
    int64_t count = 0;
    for (int64_t k = 0; k < N; k++) count += byte_at(k) != 0;
    return count;
}

static tl_tensor *odd_bools(void) {
    uint8_t bytes[N];
    for (int64_t k = 0; k < N; k++) bytes[k] = byte_at(k);
    int64_t n = N;
    tl_tensor *b = NULL;
    OK(tl_empty(&n, 1, TL_BOOL, TL_CPU, &b));
    memcpy(tl_data(b), bytes, sizeof bytes);
    return b;
}

static void test_reads(void) {
    tl_tensor *b = odd_bools(), *sum = NULL, *as_int = NULL, *same = NULL, *ones = NULL,
              *zeros = NULL, *picked = NULL, *copy = NULL, *twice = NULL;
    int64_t n = N, want = true_count();
    OK(tl_sum_all(b, &sum));
    CHECK(*(int64_t *)tl_data(sum) == want, "sum %lld, expected %lld",
          (long long)*(int64_t *)tl_data(sum), (long long)want);
    OK(tl_cast(b, TL_I64, &as_int));
    OK(tl_eq(b, b, &same));
    OK(tl_ones(&n, 1, TL_F32, TL_CPU, &ones));
    OK(tl_zeros(&n, 1, TL_F32, TL_CPU, &zeros));
    OK(tl_where(b, ones, zeros, &picked));
    OK(tl_clone(b, &copy));
    OK(tl_add(b, b, &twice));
    int bad = 0;
    for (int64_t k = 0; k < N; k++) {
        int64_t truth = byte_at(k) != 0;
        bad += ((int64_t *)tl_data(as_int))[k] != truth;
        bad += ((uint8_t *)tl_data(same))[k] != 1;
        bad += ((float *)tl_data(picked))[k] != (float)truth;
        bad += ((uint8_t *)tl_data(copy))[k] != truth;
        bad += ((int64_t *)tl_data(twice))[k] != 2 * truth;
        int64_t index = k;
        tl_scalar s;
        OK(tl_get(b, &index, &s));
        bad += s.kind != TL_SCALAR_BOOL || s.value.b != (truth != 0);
    }
    CHECK(bad == 0, "%d elements read wrongly from bool bytes 0/2/255", bad);
    tl_release(b), tl_release(sum), tl_release(as_int), tl_release(same), tl_release(ones);
    tl_release(zeros), tl_release(picked), tl_release(copy), tl_release(twice);
}

static void test_new_bools_are_false(void) {
    int64_t n = 4096;
    tl_tensor *b = NULL;
    OK(tl_empty(&n, 1, TL_BOOL, TL_CPU, &b));
    int nonzero = 0;
    for (int64_t k = 0; k < n; k++) nonzero += ((uint8_t *)tl_data(b))[k] != 0;
    CHECK(nonzero == 0, "tl_empty(bool) left %d non-zero bytes", nonzero);
    tl_release(b);
}

int main(void) {
    test_reads();
    test_new_bools_are_false();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("test_bool_bytes: all %d checks passed\n", checks);
    return 0;
}
