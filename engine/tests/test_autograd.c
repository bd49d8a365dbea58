/* C unit test of autograd without Lua: gradients against finite differences,
   split-kernel gating seen through the trace, saved-tensor version checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/autograd.h"
#include "tlua/tlua.h"

#include "check.h"

static tl_tensor *random_f64(int64_t rows, int64_t cols, bool requires_grad) {
    int64_t shape[2] = {rows, cols};
    tl_tensor *t = NULL;
    OK(tl_randn(shape, 2, TL_F64, TL_CPU, &t));
    if (requires_grad) OK(tl_set_requires_grad(t, true));
    return t;
}

static double sum_of(tl_tensor *t) {
    tl_tensor *s = NULL;
    tl_scalar v = tl_scalar_float(NAN);
    OK(tl_sum_all(t, &s));
    OK(tl_item(s, &v));
    tl_release(s);
    return tl_scalar_to_double(v);
}

/* loss = sum(linear(x, w, b) * linear(x, w, b)) */
static double linear_loss(tl_tensor *x, tl_tensor *w, tl_tensor *b, tl_tensor **loss_out) {
    tl_tensor *y = NULL, *sq = NULL, *loss = NULL;
    OK(tl_ag_linear(x, w, b, &y));
    OK(tl_ag_mul(y, y, &sq));
    OK(tl_ag_sum_all(sq, &loss));
    double value = sum_of(loss);
    tl_release(y), tl_release(sq);
    if (loss_out)
        *loss_out = loss;
    else
        tl_release(loss);
    return value;
}

/* compares t's gradient with central differences of linear_loss */
static void check_gradient(const char *name, tl_tensor *t, tl_tensor *x, tl_tensor *w,
                           tl_tensor *b) {
    tl_tensor *grad = tl_grad(t);
    CHECK(grad != NULL, "%s has no gradient", name);
    if (!grad) return;
    double *data = tl_data(t);
    double worst = 0;
    for (int64_t i = 0; i < tl_numel(t); i++) {
        double saved = data[i], h = 1e-6;
        bool previous = tl_set_grad_enabled(false);
        data[i] = saved + h;
        double up = linear_loss(x, w, b, NULL);
        data[i] = saved - h;
        double down = linear_loss(x, w, b, NULL);
        data[i] = saved;
        tl_set_grad_enabled(previous);
        double numeric = (up - down) / (2 * h), analytic = ((double *)tl_data(grad))[i];
        double err = fabs(numeric - analytic) / (1 + fabs(numeric));
        if (err > worst) worst = err;
    }
    CHECK(worst < 1e-6, "%s: gradient differs from finite differences by %g", name, worst);
}

static bool trace_has(tl_trace_event *events, int count, const char *op) {
    for (int i = 0; i < count; i++)
        if (strcmp(events[i].op, op) == 0) return true;
    return false;
}

static void test_linear(bool input_grad, bool weight_grad) {
    tl_manual_seed(7);
    tl_tensor *x = random_f64(5, 4, input_grad), *w = random_f64(3, 4, weight_grad);
    int64_t three = 3;
    tl_tensor *b = NULL;
    OK(tl_randn(&three, 1, TL_F64, TL_CPU, &b));
    OK(tl_set_requires_grad(b, true));
    tl_tensor *loss = NULL;
    linear_loss(x, w, b, &loss);
    tl_trace_event *events = NULL;
    int count = 0;
    tl_trace_begin();
    OK(tl_backward(loss, NULL, false));
    OK(tl_trace_end(&events, &count));
    CHECK(trace_has(events, count, "linear_backward_input") == input_grad,
          "linear_backward_input ran: %d, input requires grad: %d",
          trace_has(events, count, "linear_backward_input"), input_grad);
    CHECK(trace_has(events, count, "linear_backward_weight") == weight_grad,
          "linear_backward_weight ran: %d, weight requires grad: %d",
          trace_has(events, count, "linear_backward_weight"), weight_grad);
    /* with the weight's gradient, the bias's comes from the same GEMM (its bias-gradient
       epilogue); alone, from its own */
    CHECK(trace_has(events, count, "linear_backward_bias") == !weight_grad,
          "linear_backward_bias ran: %d, weight requires grad: %d",
          trace_has(events, count, "linear_backward_bias"), weight_grad);
    free(events);
    if (input_grad) check_gradient("input", x, x, w, b);
    if (weight_grad) check_gradient("weight", w, x, w, b);
    check_gradient("bias", b, x, w, b);
    tl_release(loss), tl_release(x), tl_release(w), tl_release(b);
}

static void test_version_check(void) {
    tl_tensor *x = random_f64(2, 2, true), *y = NULL, *z = NULL, *s = NULL;
    OK(tl_ag_exp(x, &y)); /* saves its result y */
    OK(tl_ag_sum_all(y, &s));
    OK(tl_fill_(y, tl_scalar_float(1.0)));
    tl_status status = tl_backward(s, NULL, false);
    CHECK(status == TL_ERR_AUTOGRAD, "backward after an in-place change must fail");
    CHECK(strstr(tl_last_error(), "exp") && strstr(tl_last_error(), "modified in place"),
          "message names the op: %s", tl_last_error());
    tl_release(x), tl_release(y), tl_release(z), tl_release(s);
}

static void test_no_grad_reason(void) {
    tl_tensor *x = random_f64(2, 2, true), *y = NULL, *d = NULL;
    bool previous = tl_set_grad_enabled(false);
    OK(tl_ag_exp(x, &y));
    tl_set_grad_enabled(previous);
    CHECK(tl_backward(y, NULL, false) == TL_ERR_AUTOGRAD && strstr(tl_last_error(), "no_grad"),
          "no_grad reason: %s", tl_last_error());
    OK(tl_detach(x, &d));
    CHECK(tl_backward(d, NULL, false) == TL_ERR_AUTOGRAD && strstr(tl_last_error(), "detach"),
          "detach reason: %s", tl_last_error());
    tl_release(x), tl_release(y), tl_release(d);
}

int main(void) {
    test_linear(true, true);
    test_linear(false, true);
    test_linear(true, false);
    test_version_check();
    test_no_grad_reason();
    if (failures)
        printf("%d failure(s)\n", failures);
    else
        printf("test_autograd: all passed\n");
    return failures != 0;
}
