/* CUDA softmax and log_softmax along one dim and their table, the dtypes of cpu/softmax.c:
   numerically stable (the max is
   subtracted), compute in float32 for bfloat16/float16, sums of exponentials in double, as
   cpu/softmax.c. A group of threads (a warp, or a block for long rows) per row when the dim is
   unit-stride, a warp holding its row in registers when the rows are dense and 16-byte aligned,
   else a thread per row walking it with coalesced neighbours. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define SOFTMAX_THREADS 256
#define COLS_X          32 /* rows per block of the strided kernel */
#define COLS_Y_MAX      32 /* its slices of the dim */

/* Rows at pos (tensors: 0 in, 1 out), len elements each, step_in / step_out apart. */
typedef struct tl_cuda_softmax {
    tl_cuda_where at;
    int dtype;
    bool log_mode;
    const void *in;
    void *out;
    int64_t len, step_in, step_out;
    tl_cuda_positions pos;
    bool dense; /* in and out contiguous, 16-byte aligned, the dim the last */
} tl_cuda_softmax;

#define REGS_ROWS    4 /* rows (warps) per block of the register kernel */
#define REGS_VECTORS 8 /* 16-byte vectors a lane holds: 2048 16-bit or 1024 32-bit elements */

template <typename C> struct max_merge {
    /* NaN never wins (as the CPU's v > max ? v : max from -inf); it reaches the output
       through the exponentials */
    __device__ C operator()(C a, C b) const { return b > a ? b : a; }
};

/* The output of x in a row of maximum m: log_mode: (x - m) - scale with scale = log(sum), else
   exp(x - m) * scale with scale = 1 / sum. */
template <class E>
__device__ __forceinline__ typename E::T softmax_value(typename E::C x, typename E::C m,
                                                       typename E::C scale, bool log_mode) {
    if (log_mode) return E::store(tl_sub(tl_sub(x, m), scale));
    return E::store(tl_mul(tl_exp(tl_sub(x, m)), scale));
}

template <class E>
__device__ __forceinline__ typename E::C softmax_scale(double sum, bool log_mode) {
    typedef typename E::C C;
    return log_mode ? (C)log(sum) : (C)tl_div(1.0, sum);
}

template <class E>
__global__ void __launch_bounds__(SOFTMAX_THREADS)
    softmax_rows(const typename E::T *in, typename E::T *out,
                 const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step_in,
                 int64_t step_out, bool log_mode, int group) {
    typedef typename E::C C;
    __shared__ C smem_max[32];
    __shared__ double smem_sum[32];
    const int lane = (int)threadIdx.x % group, per_block = (int)blockDim.x / group;
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < pos.count;
         first += (int64_t)gridDim.x * per_block) {
        const int64_t row = first + (int)threadIdx.x / group;
        const bool valid = row < pos.count;
        int64_t off[2] = {0, 0};
        if (valid) tl_position_offsets<2>(pos, row, off);
        const typename E::T *x = in + off[0];
        typename E::T *y = out + off[1];
        C m = -INFINITY;
        if (valid)
            for (int64_t r = lane; r < len; r += group) {
                C v = E::load(x[r * step_in]);
                m = v > m ? v : m;
            }
        m = tl_group_allreduce(m, max_merge<C>(), (C)-INFINITY, smem_max, group);
        double sum = 0;
        if (valid)
            for (int64_t r = lane; r < len; r += group)
                sum += (double)tl_exp(tl_sub(E::load(x[r * step_in]), m));
        sum = tl_group_allreduce(sum, tl_sum_merge(), 0.0, smem_sum, group);
        if (valid) {
            const C scale = softmax_scale<E>(sum, log_mode);
            for (int64_t r = lane; r < len; r += group)
                y[r * step_out] = softmax_value<E>(E::load(x[r * step_in]), m, scale, log_mode);
        }
    }
}

/* Dense rows of len elements (a multiple of a 16-byte vector's, at most 32 V vectors), 16-byte
   aligned: a warp per row holds it in registers (lane l the vectors l, l + 32, ...), so it is read
   from memory once and each exponential computed once: the max, then e = exp(x - max) kept in
   float32 with a lane's partial sum (32 V at most: exact enough to merge in double across the warp,
   as the other kernels sum), then the outputs e / sum (log: x - max - log(sum)). */
template <class E, int V>
__global__ void __launch_bounds__(32 * REGS_ROWS)
    softmax_rows_registers(const typename E::T *in, typename E::T *out, int64_t rows, int len,
                           bool log_mode) {
    typedef typename E::T T;
    typedef typename E::C C;
    constexpr int per = 16 / sizeof(T);
    const int lane = (int)threadIdx.x % 32, vectors = len / per;
    for (int64_t row = (int64_t)blockIdx.x * REGS_ROWS + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * REGS_ROWS) {
        const uint4 *x = (const uint4 *)(in + row * len);
        uint4 *y = (uint4 *)(out + row * len);
        uint4 raw[V];
#pragma unroll
        for (int i = 0; i < V; i++)
            if (i * 32 + lane < vectors) raw[i] = x[i * 32 + lane];
        C m = -INFINITY;
#pragma unroll
        for (int i = 0; i < V; i++)
            if (i * 32 + lane < vectors)
#pragma unroll
                for (int j = 0; j < per; j++)
                    m = max_merge<C>()(m, E::load(((const T *)&raw[i])[j]));
        m = tl_shfl_idx0(tl_warp_reduce(m, max_merge<C>()));
        C e[V][per];
        C partial = 0;
#pragma unroll
        for (int i = 0; i < V; i++)
            if (i * 32 + lane < vectors)
#pragma unroll
                for (int j = 0; j < per; j++) {
                    e[i][j] = tl_exp(tl_sub(E::load(((const T *)&raw[i])[j]), m));
                    partial = tl_add(partial, e[i][j]);
                }
        const double sum = tl_shfl_idx0(tl_warp_reduce((double)partial, tl_sum_merge()));
        const C scale = softmax_scale<E>(sum, log_mode);
#pragma unroll
        for (int i = 0; i < V; i++) {
            if (i * 32 + lane >= vectors) continue;
            T *o = (T *)&raw[i];
#pragma unroll
            for (int j = 0; j < per; j++)
                o[j] = log_mode ? E::store(tl_sub(tl_sub(E::load(o[j]), m), scale))
                                : E::store(tl_mul(e[i][j], scale));
            y[i * 32 + lane] = raw[i];
        }
    }
}

/* Rows side by side in memory (the dim strided): threads x of a block take COLS_X neighbouring
   rows, threads y (blockDim.y) slices of the dim, merged in y order through shared memory. */
template <class E>
__global__ void __launch_bounds__(COLS_X *COLS_Y_MAX)
    softmax_cols(const typename E::T *in, typename E::T *out,
                 const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step_in,
                 int64_t step_out, bool log_mode) {
    typedef typename E::C C;
    __shared__ C smem_max[COLS_Y_MAX][COLS_X];
    __shared__ double smem_sum[COLS_Y_MAX][COLS_X];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, ny = (int)blockDim.y;
    const int64_t tiles = (pos.count + COLS_X - 1) / COLS_X;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t row = tile * COLS_X + tx;
        const bool valid = row < pos.count;
        int64_t off[2] = {0, 0};
        if (valid) tl_position_offsets<2>(pos, row, off);
        const typename E::T *x = in + off[0];
        typename E::T *y = out + off[1];
        C m = -INFINITY;
        if (valid)
            for (int64_t r = ty; r < len; r += ny) {
                C v = E::load(x[r * step_in]);
                m = v > m ? v : m;
            }
        smem_max[ty][tx] = m;
        __syncthreads();
        m = smem_max[0][tx];
        for (int k = 1; k < ny; k++) m = max_merge<C>()(m, smem_max[k][tx]);
        double sum = 0;
        if (valid)
            for (int64_t r = ty; r < len; r += ny)
                sum += (double)tl_exp(tl_sub(E::load(x[r * step_in]), m));
        smem_sum[ty][tx] = sum;
        __syncthreads();
        sum = smem_sum[0][tx];
        for (int k = 1; k < ny; k++) sum += smem_sum[k][tx];
        if (valid) {
            const C scale = softmax_scale<E>(sum, log_mode);
            for (int64_t r = ty; r < len; r += ny)
                y[r * step_out] = softmax_value<E>(E::load(x[r * step_in]), m, scale, log_mode);
        }
        __syncthreads();
    }
}

/* The launch's paths, shared by its kernels (kernels/kernel.h's loop variants). */
enum { PATH_ROWS_WARP, PATH_ROWS_BLOCK, PATH_COLS, PATH_ROWS_REGISTERS };
static const tl_kernel_variant paths[] = {
    TL_LOOP_VARIANT("softmax", TL_DTYPES_FLOATING, "rows_warp",
                    "lines of < 1024, the dim unit-stride (or the rows not coalescing): a warp "
                    "per line"),
    TL_LOOP_VARIANT("softmax", TL_DTYPES_FLOATING, "rows_block",
                    "the same with lines of >= 1024: a block per line"),
    TL_LOOP_VARIANT("softmax", TL_DTYPES_FLOATING, "cols",
                    "the dim strided over runs of >= 8 unit-stride rows: tiles of neighbouring "
                    "lines"),
    TL_LOOP_VARIANT("softmax", TL_DTYPES_F32 | TL_DTYPES_BF16 | TL_DTYPES_F16, "rows_registers",
                    "dense 16-byte aligned lines of 256 to 2048 16-bit (1024 32-bit) elements, a "
                    "multiple of 16 bytes: a warp per line held in registers"),
};

/* Whether the register kernel takes s (not float64: its rows would not fit). */
template <typename T> static bool registers_fit(const tl_cuda_softmax *s) {
    constexpr int per = 16 / sizeof(T);
    return sizeof(T) <= 4 && s->dense && s->len >= 256 && s->len % per == 0 &&
           s->len <= 32 * REGS_VECTORS * per;
}

static tl_status launch_softmax(const tl_cuda_softmax *s) {
    return tl_cuda_floating(s->dtype, s->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const tl_cuda_positions &pos = s->pos;
        const int64_t inner = pos.ndim ? pos.strides[0][pos.ndim - 1] : 0;
        /* the strided kernel needs runs of neighbouring rows to coalesce */
        const int64_t run = pos.ndim ? pos.shape[pos.ndim - 1] : 1;
        const bool rows = s->len > 1 && (s->step_in == 1 || inner != 1 || run < 8);
        if (registers_fit<T>(s)) {
            tl_loop_variant_ran(&paths[PATH_ROWS_REGISTERS]);
            const unsigned grid =
                tl_cuda_grid(tl_ceil_div(pos.count, REGS_ROWS), s->at.sm_count, 2048 / 128);
            if constexpr (sizeof(T) <= 4) {
                /* the rows' vectors held a lane: 4, or 8 for the longest */
                if (s->len <= 32 * 4 * (16 / (int)sizeof(T)))
                    softmax_rows_registers<E, 4><<<grid, 32 * REGS_ROWS, 0, s->at.stream>>>(
                        (const T *)s->in, (T *)s->out, pos.count, (int)s->len, s->log_mode);
                else
                    softmax_rows_registers<E, REGS_VECTORS>
                        <<<grid, 32 * REGS_ROWS, 0, s->at.stream>>>(
                            (const T *)s->in, (T *)s->out, pos.count, (int)s->len, s->log_mode);
            }
        } else if (rows) {
            const int group = s->len >= 1024 ? SOFTMAX_THREADS : 32;
            tl_loop_variant_ran(&paths[group == 32 ? PATH_ROWS_WARP : PATH_ROWS_BLOCK]);
            const unsigned grid =
                tl_cuda_grid(tl_ceil_div(pos.count, SOFTMAX_THREADS / group), s->at.sm_count);
            softmax_rows<E><<<grid, SOFTMAX_THREADS, 0, s->at.stream>>>(
                (const T *)s->in, (T *)s->out, pos, s->len, s->step_in, s->step_out, s->log_mode,
                group);
        } else {
            /* more slices of the dim where there are few tiles of rows */
            tl_loop_variant_ran(&paths[PATH_COLS]);
            const int64_t tiles = tl_ceil_div(pos.count, COLS_X);
            const int ny = s->len < 8 ? 1 : tiles >= 4 * s->at.sm_count ? 8 : COLS_Y_MAX;
            const unsigned grid = tl_cuda_grid(tiles, s->at.sm_count, 2048 / (COLS_X * ny));
            softmax_cols<E><<<grid, dim3(COLS_X, ny), 0, s->at.stream>>>(
                (const T *)s->in, (T *)s->out, pos, s->len, s->step_in, s->step_out, s->log_mode);
        }
        return tl_cuda_check_launch(s->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status run_softmax(const char *op, bool log_mode, tl_tensor *out, const tl_tensor *in,
                             int dim) {
    tl_cuda_softmax s{};
    s.dtype = tl_cuda_dtype_of(in);
    s.log_mode = log_mode;
    s.in = tl_data(in);
    s.out = tl_data(out);
    s.len = in->shape[dim];
    s.step_in = in->strides[dim];
    s.step_out = out->strides[dim];
    tl_cuda_positions_of(&s.pos, in, dim, {in, out});
    s.dense = dim == in->ndim - 1 && tl_is_contiguous(in) && tl_is_contiguous(out) &&
              (uintptr_t)s.in % 16 == 0 && (uintptr_t)s.out % 16 == 0;
    if (s.pos.count == 0 || s.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &s.at));
    return launch_softmax(&s);
}

static tl_status cuda_softmax(tl_tensor *out, const tl_tensor *in, int dim) {
    return run_softmax("softmax", false, out, in, dim);
}

static tl_status cuda_log_softmax(tl_tensor *out, const tl_tensor *in, int dim) {
    return run_softmax("log_softmax", true, out, in, dim);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(softmax, TL_DTYPES_FLOATING, softmax, cuda_softmax),
    TL_KERNEL(log_softmax, TL_DTYPES_FLOATING, softmax, cuda_log_softmax),
};

TL_KERNEL_TABLE(tl_cuda_softmax_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_softmax_variants, TL_DEVICE_CUDA, paths);
