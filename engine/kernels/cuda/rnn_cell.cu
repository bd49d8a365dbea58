/* CUDA kernels of the fused LSTM / GRU cell pointwise math (family RNN_CELL), the math and the
   tensors of cpu/rnn_cell.c: a thread per (row, hidden unit), every gate of that unit read and
   written by it (16-bit dtypes compute in float32), as many units at once as the grid holds. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define CELL_THREADS 256

__device__ __forceinline__ float cell_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ double cell_sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}
__device__ __forceinline__ float cell_tanh(float x) {
    return tanhf(x);
}
__device__ __forceinline__ double cell_tanh(double x) {
    return tanh(x);
}

#define CELL_LOOP(count)                                                                           \
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < (count);                  \
         u += (int64_t)gridDim.x * blockDim.x)

/* out h, c, ws (NULL: none); in gates, gates2 (NULL: none), c_prev */
template <class E>
__global__ void __launch_bounds__(CELL_THREADS)
    lstm_forward(typename E::T *h, typename E::T *c, typename E::T *ws, const typename E::T *g1,
                 const typename E::T *g2, const typename E::T *cp, int64_t N, int64_t H) {
    typedef typename E::C C;
    CELL_LOOP(N * H) {
        const int64_t r = u / H, j = u - r * H, base = r * 4 * H + j;
        C pre[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            pre[k] = E::load(g1[base + k * H]) + (g2 ? E::load(g2[base + k * H]) : (C)0);
        const C i = cell_sigmoid(pre[0]), f = cell_sigmoid(pre[1]), g = cell_tanh(pre[2]),
                o = cell_sigmoid(pre[3]);
        const C cn = f * E::load(cp[u]) + i * g;
        c[u] = E::store(cn);
        h[u] = E::store(o * cell_tanh(cn));
        if (ws) {
            ws[base] = E::store(i), ws[base + H] = E::store(f);
            ws[base + 2 * H] = E::store(g), ws[base + 3 * H] = E::store(o);
        }
    }
}

/* out d_gates, d_c_prev (NULL: none); in d_h, d_h2, d_c (each NULL: zero), ws, c_prev, c */
template <class E>
__global__ void __launch_bounds__(CELL_THREADS)
    lstm_backward(typename E::T *dg, typename E::T *dcp, const typename E::T *dh1,
                  const typename E::T *dh2, const typename E::T *dcn, const typename E::T *ws,
                  const typename E::T *cp, const typename E::T *cc, int64_t N, int64_t H) {
    typedef typename E::C C;
    CELL_LOOP(N * H) {
        const int64_t r = u / H, j = u - r * H, base = r * 4 * H + j;
        const C i = E::load(ws[base]), f = E::load(ws[base + H]), g = E::load(ws[base + 2 * H]),
                o = E::load(ws[base + 3 * H]);
        const C dh = (dh1 ? E::load(dh1[u]) : (C)0) + (dh2 ? E::load(dh2[u]) : (C)0);
        const C tc = cell_tanh(E::load(cc[u]));
        const C dc = (dcn ? E::load(dcn[u]) : (C)0) + dh * o * ((C)1 - tc * tc);
        dg[base] = E::store(dc * g * i * ((C)1 - i));
        dg[base + H] = E::store(dc * E::load(cp[u]) * f * ((C)1 - f));
        dg[base + 2 * H] = E::store(dc * i * ((C)1 - g * g));
        dg[base + 3 * H] = E::store(dh * tc * o * ((C)1 - o));
        if (dcp) dcp[u] = E::store(dc * f);
    }
}

/* out h, ws (NULL: none); in gi, gh, h_prev */
template <class E>
__global__ void __launch_bounds__(CELL_THREADS)
    gru_forward(typename E::T *h, typename E::T *ws, const typename E::T *gi,
                const typename E::T *gh, const typename E::T *hp, int64_t N, int64_t H) {
    typedef typename E::C C;
    CELL_LOOP(N * H) {
        const int64_t r = u / H, j = u - r * H, b3 = r * 3 * H + j;
        const C rg = cell_sigmoid(E::load(gi[b3]) + E::load(gh[b3]));
        const C z = cell_sigmoid(E::load(gi[b3 + H]) + E::load(gh[b3 + H]));
        const C hn = E::load(gh[b3 + 2 * H]);
        const C n = cell_tanh(E::load(gi[b3 + 2 * H]) + rg * hn);
        h[u] = E::store(n + z * (E::load(hp[u]) - n));
        if (ws) {
            const int64_t b4 = r * 4 * H + j;
            ws[b4] = E::store(rg), ws[b4 + H] = E::store(z);
            ws[b4 + 2 * H] = E::store(n), ws[b4 + 3 * H] = E::store(hn);
        }
    }
}

/* out d_gi, d_gh, d_h_prev (each NULL: none); in d_h, d_h2 (NULL: zero), ws, h_prev */
template <class E>
__global__ void __launch_bounds__(CELL_THREADS)
    gru_backward(typename E::T *dgi, typename E::T *dgh, typename E::T *dhp,
                 const typename E::T *dh1, const typename E::T *dh2, const typename E::T *ws,
                 const typename E::T *hp, int64_t N, int64_t H) {
    typedef typename E::C C;
    CELL_LOOP(N * H) {
        const int64_t r = u / H, j = u - r * H, b3 = r * 3 * H + j, b4 = r * 4 * H + j;
        const C rg = E::load(ws[b4]), z = E::load(ws[b4 + H]), n = E::load(ws[b4 + 2 * H]),
                hn = E::load(ws[b4 + 3 * H]);
        const C dh = E::load(dh1[u]) + (dh2 ? E::load(dh2[u]) : (C)0);
        const C dn = dh * ((C)1 - z) * ((C)1 - n * n);
        const C dz = dh * (E::load(hp[u]) - n) * z * ((C)1 - z);
        const C dr = dn * hn * rg * ((C)1 - rg);
        if (dgi) {
            dgi[b3] = E::store(dr), dgi[b3 + H] = E::store(dz);
            dgi[b3 + 2 * H] = E::store(dn);
        }
        if (dgh) {
            dgh[b3] = E::store(dr), dgh[b3 + H] = E::store(dz);
            dgh[b3 + 2 * H] = E::store(dn * rg);
        }
        if (dhp) dhp[u] = E::store(dh * z);
    }
}

enum cell_kind { LSTM_FORWARD, LSTM_BACKWARD, GRU_FORWARD, GRU_BACKWARD };

/* the data of t (NULL for none) as E's storage type */
template <class E> static typename E::T *cell_data(const tl_tensor *t) {
    return t ? (typename E::T *)tl_data(t) : nullptr;
}

/* the tensors of cpu/rnn_cell.c's kernels: state the [N, H] tensor that sizes the launch */
template <int K>
static tl_status run(const char *op, tl_tensor *const *out, const tl_tensor *const *in,
                     const tl_tensor *state) {
    const int64_t H = state->ndim ? state->shape[state->ndim - 1] : 1;
    const int64_t N = H ? tl_numel(state) / H : 0;
    if (N * H == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(state, op, &at));
    return tl_cuda_floating(tl_cuda_dtype_of(state), op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(N * H, CELL_THREADS), at.sm_count);
        if constexpr (K == LSTM_FORWARD)
            lstm_forward<E><<<grid, CELL_THREADS, 0, at.stream>>>(
                cell_data<E>(out[0]), cell_data<E>(out[1]), cell_data<E>(out[2]),
                cell_data<E>(in[0]), cell_data<E>(in[1]), cell_data<E>(in[2]), N, H);
        else if constexpr (K == LSTM_BACKWARD)
            lstm_backward<E><<<grid, CELL_THREADS, 0, at.stream>>>(
                cell_data<E>(out[0]), cell_data<E>(out[1]), cell_data<E>(in[0]),
                cell_data<E>(in[1]), cell_data<E>(in[2]), cell_data<E>(in[3]), cell_data<E>(in[4]),
                cell_data<E>(in[5]), N, H);
        else if constexpr (K == GRU_FORWARD)
            gru_forward<E><<<grid, CELL_THREADS, 0, at.stream>>>(
                cell_data<E>(out[0]), cell_data<E>(out[1]), cell_data<E>(in[0]),
                cell_data<E>(in[1]), cell_data<E>(in[2]), N, H);
        else
            gru_backward<E><<<grid, CELL_THREADS, 0, at.stream>>>(
                cell_data<E>(out[0]), cell_data<E>(out[1]), cell_data<E>(out[2]),
                cell_data<E>(in[0]), cell_data<E>(in[1]), cell_data<E>(in[2]), cell_data<E>(in[3]),
                N, H);
        return tl_cuda_check_launch(op);
    });
}

static tl_status cuda_lstm_forward(tl_tensor *const *out, const tl_tensor *const *in,
                                   const tl_op_args *args) {
    (void)args;
    return run<LSTM_FORWARD>("lstm_cell_pointwise", out, in, in[2]);
}
static tl_status cuda_lstm_backward(tl_tensor *const *out, const tl_tensor *const *in,
                                    const tl_op_args *args) {
    (void)args;
    return run<LSTM_BACKWARD>("lstm_cell_pointwise_backward", out, in, in[4]);
}
static tl_status cuda_gru_forward(tl_tensor *const *out, const tl_tensor *const *in,
                                  const tl_op_args *args) {
    (void)args;
    return run<GRU_FORWARD>("gru_cell_pointwise", out, in, in[2]);
}
static tl_status cuda_gru_backward(tl_tensor *const *out, const tl_tensor *const *in,
                                   const tl_op_args *args) {
    (void)args;
    return run<GRU_BACKWARD>("gru_cell_pointwise_backward", out, in, in[3]);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(lstm_cell_pointwise, TL_DTYPES_FLOATING, tensors, cuda_lstm_forward),
    TL_KERNEL(lstm_cell_pointwise_backward, TL_DTYPES_FLOATING, tensors, cuda_lstm_backward),
    TL_KERNEL(gru_cell_pointwise, TL_DTYPES_FLOATING, tensors, cuda_gru_forward),
    TL_KERNEL(gru_cell_pointwise_backward, TL_DTYPES_FLOATING, tensors, cuda_gru_backward),
};

TL_KERNEL_TABLE(tl_cuda_rnn_cell_table, TL_DEVICE_CUDA, entries);
