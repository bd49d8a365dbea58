/* Expanding the op table (tlua/ops.def) for the rows of one family. */
#ifndef TLUA_OP_TABLE_H
#define TLUA_OP_TABLE_H

/* Inside `#define OP(name, family, differentiable, backward) TL_IF_FAMILY(family, POINTWISE,
   MACRO, name)` followed by `#include "tlua/ops.def"`, MACRO(name) expands for the rows of the
   POINTWISE family and to nothing for the others. A family selected this way has a probe
   TL_FAMILY_PROBE_<F>_<F> below; the probe supplies the argument that picks the 1. */
#define TL_FAMILY_PROBE_GEMM_GEMM                             ~, 1
#define TL_FAMILY_PROBE_POINTWISE_POINTWISE                   ~, 1
#define TL_FAMILY_PROBE_POINTWISE_BACKWARD_POINTWISE_BACKWARD ~, 1
#define TL_FAMILY_PROBE_POINTWISE_BINARY_POINTWISE_BINARY     ~, 1

#define TL_OP_TABLE_SECOND_(a, b, ...) b
#define TL_OP_TABLE_SECOND(...)        TL_OP_TABLE_SECOND_(__VA_ARGS__)
#define TL_FAMILY_IS(family, wanted)   TL_OP_TABLE_SECOND(TL_FAMILY_PROBE_##wanted##_##family, 0, ~)
#define TL_OP_TABLE_IF_1(macro, name)  macro(name)
#define TL_OP_TABLE_IF_0(macro, name)
#define TL_OP_TABLE_IF_(is, macro, name) TL_OP_TABLE_IF_##is(macro, name)
#define TL_OP_TABLE_IF(is, macro, name)  TL_OP_TABLE_IF_(is, macro, name)
#define TL_IF_FAMILY(family, wanted, macro, name)                                                  \
    TL_OP_TABLE_IF(TL_FAMILY_IS(family, wanted), macro, name)

#endif
