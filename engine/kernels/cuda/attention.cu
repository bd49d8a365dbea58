/* CUDA scaled dot-product attention (kernels/kernel.h's attention contract): the plain path, the
   choice of path, and the kernel table.
   A tensor-core path for bf16/f16 with head dims 32, 64 and 128 on 16-byte aligned data
   (FlashAttention-2: mma.sync m16n8k16, ldmatrix, cp.async double buffering, the softmax online
   in float32; the backward one CTA per key block with dK/dV in registers and dQ summed in a
   float32 workspace by atomics) and a plain path for the rest (float32, float64, any head dim,
   any alignment), computing in the dtype's compute type. Memory is linear in T and S: no
   [T, S] buffer anywhere. */
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_dnn.h"
#include "kernels/cuda/describe.cuh"

namespace {

/* ==== the plain path ========================================================================
   One warp per query row (forward, dQ) or key row (dK, dV), the other side in chunks of 32, one
   lane per element of the chunk; the rows the warp works on in shared memory, in the compute
   type C (float, double for float64). */
constexpr int PLAIN_WARPS = 4;

template <typename C> __device__ __forceinline__ C warp_max(C x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
template <typename C> __device__ __forceinline__ C warp_sum(C x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* A row of B * H heads of n positions each (n = T: a query row, n = S: a key row):
   row = bh * n + pos, bh = b * H + h. */
struct head_row {
    int64_t row, bh, pos, b, h;
};

/* The rows, a warp per row, `warps` warps a block, grid-stride: body(r) for each of this warp's
   rows r. */
template <typename F>
__device__ __forceinline__ void for_each_head_row(const tl_cuda_attention &a, int64_t n, int warps,
                                                  F body) {
    const int64_t rows = a.B * a.H * n;
    for (int64_t row = (int64_t)blockIdx.x * warps + threadIdx.x / 32; row < rows;
         row += (int64_t)gridDim.x * warps) {
        const int64_t bh = row / n;
        body(head_row{row, bh, row % n, bh / a.H, bh % a.H});
    }
}

/* This warp's share of a plain kernel's shared memory: per_warp compute-type elements (the launch
   gives a block PLAIN_WARPS shares). */
template <typename C> __device__ __forceinline__ C *warp_smem(int64_t per_warp) {
    extern __shared__ __align__(16) unsigned char plain_smem[];
    return (C *)plain_smem + threadIdx.x / 32 * per_warp;
}

/* sum over d of x[d] (shared) * row[d] (global, dtype) */
template <typename E>
__device__ __forceinline__ typename E::C dot(const typename E::C *x, const typename E::T *row,
                                             int64_t D) {
    typename E::C s = 0;
    for (int64_t d = 0; d < D; d++) s += x[d] * E::load(row[d]);
    return s;
}

template <typename E>
__global__ void forward_plain(const tl_cuda_attention a, typename E::C scale, Dropout drop,
                              typename E::C drop_scale) {
    typedef typename E::T T;
    typedef typename E::C C;
    const int lane = threadIdx.x % 32;
    const int64_t D = a.D, S = a.S;
    C *sq = warp_smem<C>(2 * D + 32), *so = sq + D, *sp = so + D;
    for_each_head_row(a, a.T, PLAIN_WARPS, [&](const head_row &r) {
        const int64_t row = r.row, i = r.pos, b = r.b, h = r.h;
        const T *q = at_bh<const T>(a, Q, b, h) + i * a.stride[Q][2];
        const T *k = at_bh<const T>(a, K, b, h), *v = at_bh<const T>(a, V, b, h);
        const int64_t k_row = a.stride[K][2], v_row = a.stride[V][2];
        for (int64_t d = lane; d < D; d += 32) sq[d] = E::load(q[d]), so[d] = 0;
        __syncwarp();
        const int64_t n_end = a.causal ? min(S, i + 1) : S;
        C m = -INFINITY, l = 0;
        for (int64_t j0 = 0; j0 < n_end; j0 += 32) {
            const int64_t j = j0 + lane;
            const int n = (int)min((int64_t)32, n_end - j0);
            C s = -INFINITY;
            if (j < n_end) s = dot<E>(sq, k + j * k_row, D) * scale;
            const C m_new = max(m, warp_max(s)); /* finite: lane 0 has a key */
            const C alpha = tl_exp(m - m_new);
            const C p = j < n_end ? tl_exp(s - m_new) : C(0);
            l = l * alpha + warp_sum(p);
            m = m_new;
            C pz = p;
            if (drop.threshold && j < n_end && !drop.keep((uint64_t)(row * S + j))) pz = 0;
            sp[lane] = pz;
            __syncwarp();
            for (int64_t d = lane; d < D; d += 32) {
                C acc = so[d] * alpha;
                for (int jj = 0; jj < n; jj++) acc += sp[jj] * E::load(v[(j0 + jj) * v_row + d]);
                so[d] = acc;
            }
            __syncwarp();
        }
        T *out = at_bh<T>(a, OUT, b, h) + i * a.stride[OUT][2];
        const C inv = l > 0 ? drop_scale / l : C(0);
        for (int64_t d = lane; d < D; d += 32) out[d] = E::store(so[d] * inv);
        if (lane == 0) ((C *)a.lse)[row] = l > 0 ? m + log(l) : -INFINITY;
        __syncwarp();
    });
}

/* delta = rowsum(dO * O) per query, in the compute type (float32 stored for 16-bit dtypes) */
template <typename E> __global__ void delta_kernel(const tl_cuda_attention a) {
    typedef typename E::T T;
    typedef typename E::C C;
    const int lane = threadIdx.x % 32;
    for_each_head_row(a, a.T, blockDim.x / 32, [&](const head_row &r) {
        const int64_t row = r.row, i = r.pos, b = r.b, h = r.h;
        const T *o = at_bh<const T>(a, OUT, b, h) + i * a.stride[OUT][2];
        const T *g = at_bh<const T>(a, GRAD_OUT, b, h) + i * a.stride[GRAD_OUT][2];
        C s = 0;
        for (int64_t d = lane; d < a.D; d += 32) s += E::load(o[d]) * E::load(g[d]);
        s = warp_sum(s);
        if (lane == 0) ((C *)a.delta)[row] = s;
    });
}

/* delta for operands the tensor-core path takes (16-bit, D = 32, 64 or 128, rows of 16-byte
   vectors): G = D / 8 lanes a row, each the dot of one 8-element vector of dO and of O in the
   compute type, summed over the group by shuffles */
template <typename E, int G> __global__ void delta_vector_kernel(const tl_cuda_attention a) {
    typedef typename E::T T;
    typedef typename E::C C;
    const int per_block = (int)blockDim.x / G, lane = (int)threadIdx.x % G;
    const int64_t rows = a.B * a.H * a.T;
    /* every thread of a block takes the same trips, so the shuffles see whole warps */
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < rows;
         first += (int64_t)gridDim.x * per_block) {
        const int64_t row = first + (int)threadIdx.x / G;
        C s = 0;
        if (row < rows) {
            const int64_t bh = row / a.T, i = row % a.T, b = bh / a.H, h = bh % a.H;
            const T *o = at_bh<const T>(a, OUT, b, h) + i * a.stride[OUT][2] + lane * 8;
            const T *g = at_bh<const T>(a, GRAD_OUT, b, h) + i * a.stride[GRAD_OUT][2] + lane * 8;
            const uint4 ov = *(const uint4 *)o, gv = *(const uint4 *)g;
            const T *ot = (const T *)&ov, *gt = (const T *)&gv;
#pragma unroll
            for (int j = 0; j < 8; j++) s += E::load(ot[j]) * E::load(gt[j]);
        }
#pragma unroll
        for (int offset = G / 2; offset > 0; offset /= 2)
            s += __shfl_xor_sync(0xffffffffu, s, offset);
        if (row < rows && lane == 0) ((C *)a.delta)[row] = s;
    }
}

/* dQ: one warp per query row */
template <typename E>
__global__ void backward_dq_plain(const tl_cuda_attention a, typename E::C scale, Dropout drop,
                                  typename E::C drop_scale) {
    typedef typename E::T T;
    typedef typename E::C C;
    const int lane = threadIdx.x % 32;
    const int64_t D = a.D, S = a.S;
    C *sq = warp_smem<C>(3 * D + 32), *sdo = sq + D, *sdq = sdo + D, *sp = sdq + D;
    for_each_head_row(a, a.T, PLAIN_WARPS, [&](const head_row &r) {
        const int64_t row = r.row, i = r.pos, b = r.b, h = r.h;
        const T *q = at_bh<const T>(a, Q, b, h) + i * a.stride[Q][2];
        const T *g = at_bh<const T>(a, GRAD_OUT, b, h) + i * a.stride[GRAD_OUT][2];
        const T *k = at_bh<const T>(a, K, b, h), *v = at_bh<const T>(a, V, b, h);
        const int64_t k_row = a.stride[K][2], v_row = a.stride[V][2];
        for (int64_t d = lane; d < D; d += 32)
            sq[d] = E::load(q[d]), sdo[d] = E::load(g[d]), sdq[d] = 0;
        __syncwarp();
        const C lse = ((const C *)a.lse)[row], delta = ((const C *)a.delta)[row];
        const int64_t n_end = a.causal ? min(S, i + 1) : S;
        for (int64_t j0 = 0; j0 < n_end; j0 += 32) {
            const int64_t j = j0 + lane;
            const int n = (int)min((int64_t)32, n_end - j0);
            C ds = 0;
            if (j < n_end) {
                const C p = tl_exp(dot<E>(sq, k + j * k_row, D) * scale - lse);
                C dp = dot<E>(sdo, v + j * v_row, D);
                if (drop.threshold)
                    dp = drop.keep((uint64_t)(row * S + j)) ? dp * drop_scale : C(0);
                ds = p * (dp - delta);
            }
            sp[lane] = ds;
            __syncwarp();
            for (int64_t d = lane; d < D; d += 32) {
                C acc = sdq[d];
                for (int jj = 0; jj < n; jj++) acc += sp[jj] * E::load(k[(j0 + jj) * k_row + d]);
                sdq[d] = acc;
            }
            __syncwarp();
        }
        T *gq = at_bh<T>(a, GRAD_Q, b, h) + i * a.stride[GRAD_Q][2];
        for (int64_t d = lane; d < D; d += 32) gq[d] = E::store(sdq[d] * scale);
        __syncwarp();
    });
}

/* dK and dV: one warp per key row */
template <typename E>
__global__ void backward_dkv_plain(const tl_cuda_attention a, typename E::C scale, Dropout drop,
                                   typename E::C drop_scale) {
    typedef typename E::T T;
    typedef typename E::C C;
    const int lane = threadIdx.x % 32;
    const int64_t D = a.D, S = a.S, Tq = a.T;
    C *sk = warp_smem<C>(4 * D + 64), *sv = sk + D, *sdk = sv + D, *sdv = sdk + D;
    C *sp = sdv + D, *sds = sp + 32;
    for_each_head_row(a, S, PLAIN_WARPS, [&](const head_row &r) {
        const int64_t bh = r.bh, j = r.pos, b = r.b, h = r.h;
        const T *kp = at_bh<const T>(a, K, b, h) + j * a.stride[K][2];
        const T *vp = at_bh<const T>(a, V, b, h) + j * a.stride[V][2];
        const T *q = at_bh<const T>(a, Q, b, h), *g = at_bh<const T>(a, GRAD_OUT, b, h);
        const int64_t q_row = a.stride[Q][2], g_row = a.stride[GRAD_OUT][2];
        const C *lse = (const C *)a.lse + bh * Tq, *delta = (const C *)a.delta + bh * Tq;
        for (int64_t d = lane; d < D; d += 32)
            sk[d] = E::load(kp[d]), sv[d] = E::load(vp[d]), sdk[d] = 0, sdv[d] = 0;
        __syncwarp();
        for (int64_t i0 = a.causal ? j : 0; i0 < Tq; i0 += 32) {
            const int64_t i = i0 + lane;
            const int n = (int)min((int64_t)32, Tq - i0);
            C pz = 0, ds = 0;
            if (i < Tq) {
                const C p = tl_exp(dot<E>(sk, q + i * q_row, D) * scale - lse[i]);
                const C dp = dot<E>(sv, g + i * g_row, D);
                C z = 1;
                if (drop.threshold)
                    z = drop.keep((uint64_t)((bh * Tq + i) * S + j)) ? drop_scale : C(0);
                pz = p * z;
                ds = p * (dp * z - delta[i]);
            }
            sp[lane] = pz, sds[lane] = ds;
            __syncwarp();
            for (int64_t d = lane; d < D; d += 32) {
                C acc_v = sdv[d], acc_k = sdk[d];
                for (int ii = 0; ii < n; ii++) {
                    acc_v += sp[ii] * E::load(g[(i0 + ii) * g_row + d]);
                    acc_k += sds[ii] * E::load(q[(i0 + ii) * q_row + d]);
                }
                sdv[d] = acc_v, sdk[d] = acc_k;
            }
            __syncwarp();
        }
        if (a.data[GRAD_K]) {
            T *gk = at_bh<T>(a, GRAD_K, b, h) + j * a.stride[GRAD_K][2];
            for (int64_t d = lane; d < D; d += 32) gk[d] = E::store(sdk[d] * scale);
        }
        if (a.data[GRAD_V]) {
            T *gv = at_bh<T>(a, GRAD_V, b, h) + j * a.stride[GRAD_V][2];
            for (int64_t d = lane; d < D; d += 32) gv[d] = E::store(sdv[d]);
        }
        __syncwarp();
    });
}

/* A plain kernel's launch: shared memory of PLAIN_WARPS warps of `per_warp` compute-type
   elements each, beyond the default 48 KiB when the head dim needs it. */
template <typename C, typename Kernel, typename... Args>
tl_status launch_plain(const tl_cuda_attention &a, Kernel kernel, int64_t rows, int64_t per_warp,
                       Args... args) {
    const size_t smem = (size_t)PLAIN_WARPS * (size_t)per_warp * sizeof(C);
    if (smem > 48 * 1024) {
        int limit = 0;
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, a.at.device);
        if (smem > (size_t)limit)
            return tl_error(TL_ERR_ARGUMENT, "%s: head dim %lld is too large for this device",
                            a.at.op, (long long)a.D);
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess)
            return tl_cuda_check_launch(a.at.op);
    }
    const unsigned grid = tl_cuda_grid(tl_ceil_div(rows, PLAIN_WARPS), a.at.sm_count);
    kernel<<<grid, PLAIN_WARPS * 32, smem, a.at.stream>>>(a, args...);
    return tl_cuda_check_launch(a.at.op);
}

template <typename E> tl_status run_delta_vector(const tl_cuda_attention &a, int64_t rows) {
    const int G = (int)(a.D / 8);
    const unsigned grid = tl_cuda_grid(tl_ceil_div(rows, 256 / G), a.at.sm_count);
    if (G == 4)
        delta_vector_kernel<E, 4><<<grid, 256, 0, a.at.stream>>>(a);
    else if (G == 8)
        delta_vector_kernel<E, 8><<<grid, 256, 0, a.at.stream>>>(a);
    else
        delta_vector_kernel<E, 16><<<grid, 256, 0, a.at.stream>>>(a);
    return tl_cuda_check_launch(a.at.op);
}

tl_status run_delta(const tl_cuda_attention &a) {
    const int64_t rows = a.B * a.H * a.T;
    if (rows == 0) return TL_OK;
    /* the tensor-core path's operands: whole 16-byte vectors a lane */
    if (tl_attention_fits_mma(a))
        return a.dtype == TL_CUDA_BF16 ? run_delta_vector<tl_elem<TL_CUDA_BF16>>(a, rows)
                                       : run_delta_vector<tl_elem<TL_CUDA_F16>>(a, rows);
    return tl_cuda_floating(a.dtype, a.at.op, [&](auto e) {
        typedef decltype(e) E;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(rows, 8), a.at.sm_count);
        delta_kernel<E><<<grid, 256, 0, a.at.stream>>>(a);
        return tl_cuda_check_launch(a.at.op);
    });
}

/* The plain path: every dtype, any head dim and alignment. */
const tl_kernel_variant plain_variants[] = {
    TL_VARIANT(scaled_dot_product_attention, TL_DTYPES_FLOATING, "plain",
               "float32 or float64, a head dim other than 32, 64 and 128, or an operand not "
               "16-byte aligned: a warp per query row"),
    TL_VARIANT(scaled_dot_product_attention_backward, TL_DTYPES_FLOATING, "plain",
               "as the forward's plain path: a warp per query row (dQ) and per key row (dK, dV)"),
};

/* cuDNN's fused attention (attention_dnn.c): bfloat16/float16 without dropout, where cuDNN takes
   the problem; the others are declined to tlua's kernels. */
const tl_kernel_variant dnn_variants[] = {
    TL_VARIANT(scaled_dot_product_attention, TL_DTYPES_BF16 | TL_DTYPES_F16, "cudnn",
               "cuDNN enabled (tl.cuda.set_cudnn_enabled), no dropout, head dim a multiple of 8 up "
               "to 128, operands 16-byte aligned with strides of whole 16-byte vectors: cuDNN's "
               "fused flash attention through its graph API"),
    TL_VARIANT(scaled_dot_product_attention_backward, TL_DTYPES_BF16 | TL_DTYPES_F16, "cudnn",
               "as the forward's, with all three gradients wanted: cuDNN's fused backward"),
};

} // namespace

TL_VARIANT_TABLE(tl_cuda_attention_plain_variants, TL_DEVICE_CUDA, plain_variants);
TL_VARIANT_TABLE(tl_cuda_attention_dnn_variants, TL_DEVICE_CUDA, dnn_variants);

/* a's call of cuDNN's attention (its operands, geometry and scalars) */
static tl_attention_dnn_call dnn_call(const tl_cuda_attention &a) {
    tl_attention_dnn_call call = {};
    call.device = a.at.device;
    call.stream = a.at.stream;
    call.dtype = (tl_dtype)a.dtype;
    call.B = a.B, call.H = a.H, call.T = a.T, call.S = a.S, call.D = a.D;
    static_assert((int)TL_ATTENTION_DNN_OPERANDS == (int)TL_CUDA_ATT_OPERANDS, "operands");
    for (int i = 0; i < TL_CUDA_ATT_OPERANDS; i++) {
        call.data[i] = a.data[i];
        for (int d = 0; d < 3; d++) call.stride[i][d] = a.stride[i][d];
    }
    call.lse = (float *)a.lse;
    call.scale = a.scale, call.dropout = a.dropout, call.causal = a.causal;
    /* grad_q summed in order where that costs nothing (D = 128: 3% faster on an H200) */
    call.deterministic = a.D >= 128;
    return call;
}

/* Runs a on cuDNN when it is enabled and takes the problem: *ran says whether it did. */
static tl_status try_dnn(const tl_cuda_attention &a, bool backward, bool *ran) {
    *ran = false;
    if (!a.cudnn || a.dropout > 0 || (a.dtype != TL_CUDA_BF16 && a.dtype != TL_CUDA_F16))
        return TL_OK;
    const tl_attention_dnn_call call = dnn_call(a);
    bool declined = true;
    TL_TRY(backward ? tl_attention_backward_dnn(&call, &declined)
                    : tl_attention_forward_dnn(&call, &declined));
    if (declined) return TL_OK;
    tl_variant_ran(&dnn_variants[backward ? 1 : 0], (tl_dtype)a.dtype);
    *ran = true;
    return TL_OK;
}

static tl_status launch_attention(const tl_cuda_attention *ap) {
    const tl_cuda_attention &a = *ap;
    if (a.B * a.H * a.T == 0) return TL_OK;
    bool ran = false;
    TL_TRY(try_dnn(a, false, &ran));
    if (ran) return TL_OK;
    if (tl_attention_fits_mma(a)) return tl_attention_forward_mma(a);
    tl_variant_ran(&plain_variants[0], (tl_dtype)a.dtype);
    return tl_cuda_floating(a.dtype, a.at.op, [&](auto e) {
        typedef decltype(e) E;
        typedef typename E::C C;
        return launch_plain<C>(a, forward_plain<E>, a.B * a.H * a.T, 2 * a.D + 32, (C)a.scale,
                               dropout_of(a), (C)dropout_scale(a));
    });
}

static tl_status launch_attention_backward(const tl_cuda_attention *ap) {
    const tl_cuda_attention &a = *ap;
    const bool want_q = a.data[GRAD_Q] != nullptr, want_kv = a.data[GRAD_K] || a.data[GRAD_V];
    if (a.B * a.H == 0 || (!want_q && !want_kv)) return TL_OK;
    bool ran = false;
    TL_TRY(try_dnn(a, true, &ran));
    if (ran) return TL_OK;
    TL_TRY(run_delta(a));
    if (tl_attention_fits_mma(a)) return tl_attention_backward_mma(a, want_q);
    tl_variant_ran(&plain_variants[1], (tl_dtype)a.dtype);
    return tl_cuda_floating(a.dtype, a.at.op, [&](auto e) {
        typedef decltype(e) E;
        typedef typename E::C C;
        const C scale = (C)a.scale, drop_scale = (C)dropout_scale(a);
        const Dropout drop = dropout_of(a);
        if (want_q && a.T > 0)
            TL_TRY(launch_plain<C>(a, backward_dq_plain<E>, a.B * a.H * a.T, 3 * a.D + 32, scale,
                                   drop, drop_scale));
        if (want_kv && a.S > 0)
            TL_TRY(launch_plain<C>(a, backward_dkv_plain<E>, a.B * a.H * a.S, 4 * a.D + 64, scale,
                                   drop, drop_scale));
        return TL_OK;
    });
}

/* ---- the table: the tensors unpacked into the description the launches take ---------------- */
static void operand(tl_cuda_attention *a, int which, const tl_tensor *t) {
    if (!t) return;
    a->data[which] = tl_data(t);
    for (int d = 0; d < 3; d++) a->stride[which][d] = t->strides[d];
}

/* The geometry of q [B, H, T, D] and k [B, H, S, D], the scalars, and the operands both
   directions have (q, k, v, out). */
static tl_cuda_attention describe(const tl_tensor *q, const tl_tensor *k, const tl_tensor *v,
                                  const tl_tensor *out, const tl_attention_args *args) {
    tl_cuda_attention a = {};
    a.dtype = tl_cuda_dtype_of(q);
    a.B = q->shape[0];
    a.H = q->shape[1];
    a.T = q->shape[2];
    a.S = k->shape[2];
    a.D = q->shape[3];
    a.scale = args->scale;
    a.dropout = args->dropout;
    a.causal = args->causal;
    a.cudnn = args->cudnn;
    a.seed = args->seed;
    a.counter = args->counter;
    operand(&a, TL_CUDA_ATT_Q, q);
    operand(&a, TL_CUDA_ATT_K, k);
    operand(&a, TL_CUDA_ATT_V, v);
    operand(&a, TL_CUDA_ATT_OUT, out);
    return a;
}

static tl_status cuda_attention(tl_tensor *out, tl_tensor *lse, const tl_tensor *q,
                                const tl_tensor *k, const tl_tensor *v,
                                const tl_attention_args *args) {
    tl_cuda_attention a = describe(q, k, v, out, args);
    a.lse = tl_data(lse);
    if (a.B == 0 || a.H == 0 || a.T == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(out, "scaled_dot_product_attention", &a.at));
    return launch_attention(&a);
}

static tl_status cuda_attention_backward(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v,
                                         tl_tensor *delta, const tl_tensor *grad_out,
                                         const tl_tensor *q, const tl_tensor *k, const tl_tensor *v,
                                         const tl_tensor *out, const tl_tensor *lse,
                                         const tl_attention_args *args) {
    tl_cuda_attention a = describe(q, k, v, out, args);
    operand(&a, TL_CUDA_ATT_GRAD_OUT, grad_out);
    operand(&a, TL_CUDA_ATT_GRAD_Q, grad_q);
    operand(&a, TL_CUDA_ATT_GRAD_K, grad_k);
    operand(&a, TL_CUDA_ATT_GRAD_V, grad_v);
    a.lse = tl_data(lse);
    a.delta = tl_data(delta);
    if (a.B == 0 || a.H == 0 || (!grad_q && !grad_k && !grad_v)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, "scaled_dot_product_attention_backward", &a.at));
    return launch_attention_backward(&a);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(scaled_dot_product_attention, TL_DTYPES_FLOATING, attention, cuda_attention),
    TL_KERNEL(scaled_dot_product_attention_backward, TL_DTYPES_FLOATING, attention_backward,
              cuda_attention_backward),
};

TL_KERNEL_TABLE(tl_cuda_attention_table, TL_DEVICE_CUDA, entries);
