/* interpolate as ops (nearest, bilinear): output sizes and source steps resolved as PyTorch
   resolves them, then the forward or backward kernel of family RESIZE. */
#include <math.h>

#include "ops/nn/nn_common.h"

static const char *const forward_names[] = {"upsample_nearest2d", "upsample_bilinear2d"};
static const char *const backward_names[] = {"upsample_nearest2d_backward",
                                             "upsample_bilinear2d_backward"};

/* The output size along one axis: size when > 0, else floor(in * scale). */
static tl_status out_size(const char *what, int64_t in, int64_t size, double scale, int64_t *out) {
    if (size < 0)
        return tl_error(TL_ERR_ARGUMENT, "interpolate: size must be >= 1, got %lld (%s)",
                        (long long)size, what);
    if (size > 0) {
        *out = size;
        return TL_OK;
    }
    if (!(scale > 0) || isinf(scale))
        return tl_error(TL_ERR_ARGUMENT,
                        "interpolate: give a size or a scale_factor > 0 (%s), got scale %g", what,
                        scale);
    const double o = floor((double)in * scale);
    if (o < 1 || o > 0x1p62)
        return tl_error(TL_ERR_ARGUMENT,
                        "interpolate: %s %lld times scale_factor %g gives output size %g (expected "
                        ">= 1 and < 2^62)",
                        what, (long long)in, scale, o);
    *out = (int64_t)o;
    return TL_OK;
}

/* The source step per output step along one axis (tl_resize2d's scale). */
static double source_step(const tl_interpolate_options *o, int64_t in, int64_t out, double scale) {
    if (out == in) return 1.0; /* PyTorch copies: index o reads o */
    if (o->mode == TL_INTERPOLATE_NEAREST) {
        if (out == 2 * in) return 0.5;
        return scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
    }
    if (o->align_corners) return out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0;
    return scale > 0 ? 1.0 / scale : (double)in / (double)out;
}

static tl_status resolve(const char *op, const int64_t *image, const tl_interpolate_options *o,
                         tl_resize2d *r) {
    if (o->mode != TL_INTERPOLATE_NEAREST && o->mode != TL_INTERPOLATE_BILINEAR)
        return tl_error(TL_ERR_ARGUMENT, "%s: unknown mode %d", op, (int)o->mode);
    if (image[2] < 1 || image[3] < 1) {
        char si[256];
        return tl_error(TL_ERR_SHAPE, "%s: input height and width must be >= 1, got shape %s", op,
                        nn_shape_str(image, 4, si, sizeof si));
    }
    *r = (tl_resize2d){.batch = image[0],
                       .channels = image[1],
                       .in_h = image[2],
                       .in_w = image[3],
                       .align_corners = o->align_corners};
    TL_TRY(out_size("height", image[2], o->size_h, o->scale_h, &r->out_h));
    TL_TRY(out_size("width", image[3], o->size_w, o->scale_w, &r->out_w));
    const bool sized_h = o->size_h > 0, sized_w = o->size_w > 0;
    r->scale_h = source_step(o, r->in_h, r->out_h, sized_h ? 0.0 : o->scale_h);
    r->scale_w = source_step(o, r->in_w, r->out_w, sized_w ? 0.0 : o->scale_w);
    return TL_OK;
}

/* the family's kernel call, for nn_run_image_kernel */
static tl_status call_resize(const tl_kernel_entry *k, tl_tensor *dst, const tl_tensor *src,
                             const void *desc) {
    return k->fn.resize(dst, src, (const tl_resize2d *)desc);
}

/* dst [dst_shape] from src by the kernel of op_id; an empty src leaves zeros. */
static tl_status run_resize(tl_op op_id, const tl_tensor *src, const int64_t dst_shape[4],
                            const tl_resize2d *r, tl_tensor **out) {
    return nn_run_image_kernel(op_id, src, dst_shape, call_resize, r, out);
}

tl_status tl_interpolate(const tl_tensor *input, const tl_interpolate_options *opts,
                         tl_tensor **out) {
    const char *op = forward_names[opts->mode == TL_INTERPOLATE_BILINEAR];
    char si[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: input must be [N, C, H, W], got shape %s", op,
                        tl_shape_str(input, si, sizeof si));
    TL_TRY(nn_check_floating(op, "input", input));
    tl_resize2d r;
    TL_TRY(resolve(op, input->shape, opts, &r));
    const int64_t shape[4] = {r.batch, r.channels, r.out_h, r.out_w};
    tl_op id = opts->mode == TL_INTERPOLATE_BILINEAR ? TL_OP_upsample_bilinear2d
                                                     : TL_OP_upsample_nearest2d;
    return run_resize(id, input, shape, &r, out);
}

tl_status tl_interpolate_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                  const tl_interpolate_options *opts, tl_tensor **grad_input) {
    const char *op = backward_names[opts->mode == TL_INTERPOLATE_BILINEAR];
    char sg[256], se[256];
    TL_TRY(nn_check_floating(op, "grad", grad));
    if (input_shape[0] < 0 || input_shape[1] < 0)
        return tl_error(TL_ERR_SHAPE, "%s: bad input shape %s", op,
                        nn_shape_str(input_shape, 4, se, sizeof se));
    tl_resize2d r;
    TL_TRY(resolve(op, input_shape, opts, &r));
    const int64_t expected[4] = {r.batch, r.channels, r.out_h, r.out_w};
    if (!nn_same_shape(grad, expected, 4))
        return tl_error(TL_ERR_SHAPE, "%s: grad must have shape %s, got %s", op,
                        nn_shape_str(expected, 4, se, sizeof se),
                        tl_shape_str(grad, sg, sizeof sg));
    tl_op id = opts->mode == TL_INTERPOLATE_BILINEAR ? TL_OP_upsample_bilinear2d_backward
                                                     : TL_OP_upsample_nearest2d_backward;
    return run_resize(id, grad, input_shape, &r, grad_input);
}
