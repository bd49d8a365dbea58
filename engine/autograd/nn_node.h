/* Internal: the options the nn ops' nodes keep in their ints and scalars, read back by their
   backward formulas (nn.c, pool.c) and their differentiable ones (double_backward_nn.c). */
#ifndef TLUA_NN_NODE_H
#define TLUA_NN_NODE_H

#include "autograd/graph.h"
#include "tlua/nn.h"

/* conv2d, conv_transpose2d (and conv2d_backward_weight): ints[0..6] stride h, w, padding h, w,
   dilation h, w, groups */
void tl_node_store_conv_options(tl_node *node, const tl_conv2d_options *o);
tl_conv2d_options tl_node_conv_options(const tl_node *node);
/* avg_pool2d: ints[0..8] kernel, stride, padding (h, w each), ceil_mode, count_include_pad,
   divisor */
tl_pool2d_options tl_node_pool_options(const tl_node *node);
/* interpolate: ints[0..3] mode, size_h, size_w, align_corners; scalar[0..1] the scales */
tl_interpolate_options tl_node_interpolate_options(const tl_node *node);

#endif
