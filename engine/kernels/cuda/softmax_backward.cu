/* CUDA softmax and log_softmax backward along one dim and their table: grad_input = y * (g -
   sum(g * y)) or g - exp(y) * sum(g), compute in float32 for bfloat16/float16, row sums in
   double, as cpu/softmax_backward.c. A group of threads (a warp, or a block for long rows) per
   row when the dim is unit-stride, else a thread per row walking it with coalesced neighbours.
   In place: each element is read and written by one thread, its row's sum merged (every read of
   the sum done) before any write, so grad_input may be grad or output itself. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define BACKWARD_THREADS 256
#define COLS_X           32 /* rows per block of the strided kernel */
#define COLS_Y_MAX       32 /* its slices of the dim */

/* The tensors of a softmax backward, their order in pos and step. */
enum { TL_CUDA_SMB_GRAD_INPUT, TL_CUDA_SMB_GRAD, TL_CUDA_SMB_OUTPUT, TL_CUDA_SMB_TENSORS };

/* Rows at pos, len elements each, step[k] apart in tensor k. grad_input = y * (g - sum(g * y))
   (log_mode: g - exp(y) * sum(g)); it may be grad or output itself (same offsets and strides). */
typedef struct tl_cuda_softmax_backward {
    tl_cuda_where at;
    int dtype;
    bool log_mode;
    void *grad_input;
    const void *grad, *output;
    int64_t len, step[TL_CUDA_SMB_TENSORS];
    tl_cuda_positions pos;
} tl_cuda_softmax_backward;

enum { GI = TL_CUDA_SMB_GRAD_INPUT, G = TL_CUDA_SMB_GRAD, Y = TL_CUDA_SMB_OUTPUT };

/* The pointers of one row and its steps; no __restrict__: grad_input may alias an input. */
template <class E> struct backward_row {
    typename E::T *gi;
    const typename E::T *g, *y;
    int64_t s_gi, s_g, s_y;

    /* what element r adds to the row's sum: g * y (each product in the compute type), or g */
    __device__ __forceinline__ double term(int64_t r, bool log_mode) const {
        if (log_mode) return (double)E::load(g[r * s_g]);
        return (double)tl_mul(E::load(g[r * s_g]), E::load(y[r * s_y]));
    }
    /* element r of grad_input from its g and y, read first, and the row's total */
    __device__ __forceinline__ void write(int64_t r, typename E::C total, bool log_mode) const {
        const typename E::C gv = E::load(g[r * s_g]), yv = E::load(y[r * s_y]);
        gi[r * s_gi] = log_mode ? E::store(tl_sub(gv, tl_mul(tl_exp(yv), total)))
                                : E::store(tl_mul(yv, tl_sub(gv, total)));
    }
};

template <class E>
__device__ __forceinline__ backward_row<E> row_at(const tl_cuda_softmax_backward &s, int64_t j) {
    int64_t off[3] = {0, 0, 0};
    tl_position_offsets<3>(s.pos, j, off);
    backward_row<E> row;
    row.gi = (typename E::T *)s.grad_input + off[GI];
    row.g = (const typename E::T *)s.grad + off[G];
    row.y = (const typename E::T *)s.output + off[Y];
    row.s_gi = s.step[GI];
    row.s_g = s.step[G];
    row.s_y = s.step[Y];
    return row;
}

template <class E>
__global__ void __launch_bounds__(BACKWARD_THREADS)
    backward_rows(const __grid_constant__ tl_cuda_softmax_backward s, int group) {
    typedef typename E::C C;
    __shared__ double smem[32];
    const int lane = (int)threadIdx.x % group, per_block = (int)blockDim.x / group;
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < s.pos.count;
         first += (int64_t)gridDim.x * per_block) {
        const int64_t j = first + (int)threadIdx.x / group;
        const bool valid = j < s.pos.count;
        backward_row<E> row = {};
        if (valid) row = row_at<E>(s, j);
        double sum = 0;
        if (valid)
            for (int64_t r = lane; r < s.len; r += group) sum += row.term(r, s.log_mode);
        sum = tl_group_allreduce(sum, tl_sum_merge(), 0.0, smem, group);
        if (valid) {
            const C total = (C)sum;
            for (int64_t r = lane; r < s.len; r += group) row.write(r, total, s.log_mode);
        }
    }
}

/* Rows side by side in memory (the dim strided): threads x of a block take COLS_X neighbouring
   rows, threads y (blockDim.y) slices of the dim, merged in y order through shared memory. */
template <class E>
__global__ void __launch_bounds__(COLS_X *COLS_Y_MAX)
    backward_cols(const __grid_constant__ tl_cuda_softmax_backward s) {
    typedef typename E::C C;
    __shared__ double smem[COLS_Y_MAX][COLS_X];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, ny = (int)blockDim.y;
    const int64_t tiles = (s.pos.count + COLS_X - 1) / COLS_X;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t j = tile * COLS_X + tx;
        const bool valid = j < s.pos.count;
        backward_row<E> row = {};
        if (valid) row = row_at<E>(s, j);
        double sum = 0;
        if (valid)
            for (int64_t r = ty; r < s.len; r += ny) sum += row.term(r, s.log_mode);
        smem[ty][tx] = sum;
        __syncthreads();
        sum = smem[0][tx];
        for (int k = 1; k < ny; k++) sum += smem[k][tx];
        if (valid) {
            const C total = (C)sum;
            for (int64_t r = ty; r < s.len; r += ny) row.write(r, total, s.log_mode);
        }
        __syncthreads();
    }
}

/* The launch's paths, shared by its kernels (kernels/kernel.h's loop variants). */
enum { PATH_ROWS_WARP, PATH_ROWS_BLOCK, PATH_COLS };
static const tl_kernel_variant paths[] = {
    TL_LOOP_VARIANT("softmax_backward", TL_DTYPES_FLOATING, "rows_warp",
                    "lines of < 1024, the dim unit-stride (or the rows not coalescing): a warp "
                    "per line"),
    TL_LOOP_VARIANT("softmax_backward", TL_DTYPES_FLOATING, "rows_block",
                    "the same with lines of >= 1024: a block per line"),
    TL_LOOP_VARIANT("softmax_backward", TL_DTYPES_FLOATING, "cols",
                    "the dim strided over runs of >= 8 unit-stride rows: tiles of neighbouring "
                    "lines"),
};

static tl_status launch_softmax_backward(const tl_cuda_softmax_backward *s) {
    return tl_cuda_floating(s->dtype, s->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        const tl_cuda_positions &pos = s->pos;
        const int64_t inner = pos.ndim ? pos.strides[GI][pos.ndim - 1] : 0;
        /* the strided kernel needs runs of neighbouring rows to coalesce */
        const int64_t run = pos.ndim ? pos.shape[pos.ndim - 1] : 1;
        const bool rows = s->len > 1 && (s->step[GI] == 1 || inner != 1 || run < 8);
        if (rows) {
            const int group = s->len >= 1024 ? BACKWARD_THREADS : 32;
            tl_loop_variant_ran(&paths[group == 32 ? PATH_ROWS_WARP : PATH_ROWS_BLOCK]);
            const unsigned grid =
                tl_cuda_grid(tl_ceil_div(pos.count, BACKWARD_THREADS / group), s->at.sm_count);
            backward_rows<E><<<grid, BACKWARD_THREADS, 0, s->at.stream>>>(*s, group);
        } else {
            /* more slices of the dim where there are few tiles of rows */
            tl_loop_variant_ran(&paths[PATH_COLS]);
            const int64_t tiles = tl_ceil_div(pos.count, COLS_X);
            const int ny = s->len < 8 ? 1 : tiles >= 4 * s->at.sm_count ? 8 : COLS_Y_MAX;
            const unsigned grid = tl_cuda_grid(tiles, s->at.sm_count, 2048 / (COLS_X * ny));
            backward_cols<E><<<grid, dim3(COLS_X, ny), 0, s->at.stream>>>(*s);
        }
        return tl_cuda_check_launch(s->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status run_softmax_backward(const char *op, bool log_mode, tl_tensor *grad_input,
                                      const tl_tensor *grad, const tl_tensor *output, int dim) {
    tl_cuda_softmax_backward s{};
    s.dtype = tl_cuda_dtype_of(output);
    s.log_mode = log_mode;
    s.grad_input = tl_data(grad_input);
    s.grad = tl_data(grad);
    s.output = tl_data(output);
    s.len = output->shape[dim];
    s.step[GI] = grad_input->strides[dim];
    s.step[G] = grad->strides[dim];
    s.step[Y] = output->strides[dim];
    tl_cuda_positions_of(&s.pos, output, dim, {grad_input, grad, output});
    if (s.pos.count == 0 || s.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(output, op, &s.at));
    return launch_softmax_backward(&s);
}

static tl_status cuda_softmax_backward(tl_tensor *grad_input, const tl_tensor *grad,
                                       const tl_tensor *output, int dim) {
    return run_softmax_backward("softmax_backward", false, grad_input, grad, output, dim);
}

static tl_status cuda_log_softmax_backward(tl_tensor *grad_input, const tl_tensor *grad,
                                           const tl_tensor *output, int dim) {
    return run_softmax_backward("log_softmax_backward", true, grad_input, grad, output, dim);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(softmax_backward, TL_DTYPES_FLOATING, softmax_backward, cuda_softmax_backward),
    TL_KERNEL(log_softmax_backward, TL_DTYPES_FLOATING, softmax_backward,
              cuda_log_softmax_backward),
};

TL_KERNEL_TABLE(tl_cuda_softmax_backward_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_softmax_backward_variants, TL_DEVICE_CUDA, paths);
