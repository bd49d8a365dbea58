/* The public headers from C++: tlua/tlua.h compiles as C++ and its ops and autograd run. */
#include <cmath>

#include "tlua/tlua.h"

#include "check.h"

int main() {
    tl_device cpu;
    cpu.type = TL_DEVICE_CPU;
    cpu.index = 0;
    const int64_t shape[1] = {3};
    tl_tensor *x = nullptr, *y = nullptr, *sum = nullptr;
    OK(tl_full(shape, 1, tl_scalar_float(0.5), TL_F64, cpu, &x));
    OK(tl_set_requires_grad(x, true));
    OK(tl_ag_exp(x, &y)); /* a pointwise op, declared from the op table */
    OK(tl_ag_sum_all(y, &sum));
    OK(tl_backward(sum, nullptr, false));
    tl_scalar value;
    OK(tl_item(sum, &value));
    CHECK(std::fabs(tl_scalar_to_double(value) - 3 * std::exp(0.5)) < 1e-12, "sum(exp(x)) = %g",
          tl_scalar_to_double(value));
    const double *grad = static_cast<const double *>(tl_data(tl_grad(x)));
    CHECK(std::fabs(grad[0] - std::exp(0.5)) < 1e-12, "d/dx sum(exp(x)) = %g", grad[0]);
    tl_release(sum);
    tl_release(y);
    tl_release(x);
    printf("test_cxx_api: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
