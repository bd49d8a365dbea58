/* CUDA attention, the tensor-core path (FlashAttention-2 on mma.sync m16n8k16, ldmatrix and
   cp.async double buffering, the softmax online in float32) for bf16/f16 with head dims 32, 64
   and 128 on 16-byte aligned data: the forward one CTA per query block, the backward one CTA per
   key block with dK/dV in registers and dQ summed in a float32 workspace by atomics. */
#include "kernels/cuda/attention_common.cuh"

namespace {

/* ---- forward: one CTA per (b h, block of BM = WARPS * MT * 16 queries); each warp MT m16
   tiles of queries, the keys in blocks of BN (K and V double-buffered), q in registers. -------- */
template <int D, int MT, int WARPS, int BN> struct FwdTile {
    static constexpr int THREADS = WARPS * 32, WM = MT * 16, BM = WARPS * WM;
    static constexpr int LD = D + 8;
    static constexpr int Q_SIZE = BM * LD, KV_SIZE = BN * LD;
    static constexpr size_t SMEM = (size_t)(Q_SIZE + 4 * KV_SIZE) * sizeof(uint16_t);
    static_assert(D % 16 == 0 && BN % 16 == 0, "tile");
};

template <int D, int MT, int WARPS, int BN, bool BF16, bool DROP>
__global__ void __launch_bounds__(WARPS * 32)
    forward_mma(const tl_cuda_attention a, float scale_log2, Dropout drop, float drop_scale) {
    typedef FwdTile<D, MT, WARPS, BN> G;
    constexpr int LD = G::LD, BM = G::BM;
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sq = smem, *sk = sq + G::Q_SIZE, *sv = sk + 2 * G::KV_SIZE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mat = lane / 8, j8 = lane % 8;
    const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
    const int64_t T = a.T, S = a.S;
    /* causal: the longest query blocks first */
    const int64_t mb = a.causal ? (int64_t)gridDim.y - 1 - blockIdx.y : blockIdx.y;
    const int64_t m0 = mb * BM;
    const int64_t sq_row = a.stride[Q][2], sk_row = a.stride[K][2], sv_row = a.stride[V][2];
    const uint16_t *q = at_bh<const uint16_t>(a, Q, b, h) + m0 * sq_row;
    const uint16_t *k = at_bh<const uint16_t>(a, K, b, h), *v = at_bh<const uint16_t>(a, V, b, h);
    const int64_t n_end = a.causal ? min(S, m0 + BM) : S;
    const int blocks = (int)((n_end + BN - 1) / BN);

    load_tile<D, BM, G::THREADS>(sq, q, sq_row, T - m0);
    if (blocks > 0) {
        load_tile<D, BN, G::THREADS>(sk, k, sk_row, S);
        load_tile<D, BN, G::THREADS>(sv, v, sv_row, S);
    }
    commit_copies();

    float o[MT][D / 8][4] = {};
    float mx[MT][2], l[MT][2];
#pragma unroll
    for (int t = 0; t < MT; t++) mx[t][0] = mx[t][1] = -INFINITY, l[t][0] = l[t][1] = 0.f;
    uint32_t qf[MT][D / 16][4];
    const int64_t warp_row = m0 + warp * G::WM; /* the warp's first query */

    /* dropout, S % 4 == 0: a Philox block is 4 keys of a query, the pairs of two lanes (2u,
       2u + 1 of a quad); of two n8 tiles the even lane draws the first's block, the odd lane the
       second's: 4 bits each, for m16 tile t at bit 4 k of dbits[t][k / 8], k = hf BN / 16 + the
       tile pair. A key block's bits are drawn during the previous block's P V products, which
       hide them (the first block's before the loop). */
    constexpr int DW = (BN / 4 + 31) / 32; /* words of bits per m16 tile */
    uint32_t dbits[MT][DW] = {}, next_bits[MT][DW] = {};
    auto draw = [&](int t, int hf, int np, int64_t key0) -> uint32_t {
        const uint64_t e = (uint64_t)((bh * T + warp_row + t * 16 + lane / 4 + hf * 8) * S + key0 +
                                      np * 16 + (lane & 1) * 8 + (lane % 4 / 2) * 4);
        return drop.keep4(e / 4) << (4 * ((hf * (BN / 16) + np) % 8));
    };
    const bool pipelined_drop = DROP && S % 4 == 0;
    if (pipelined_drop) {
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int np = 0; np < BN / 16; np++)
                    dbits[t][(hf * (BN / 16) + np) / 8] |= draw(t, hf, np, 0);
    }

    for (int nb = 0; nb < blocks; nb++) {
        const int64_t n0 = (int64_t)nb * BN;
        if (nb + 1 < blocks) {
            const int slot = (nb + 1) & 1;
            load_tile<D, BN, G::THREADS>(sk + slot * G::KV_SIZE, k + (n0 + BN) * sk_row, sk_row,
                                         S - n0 - BN);
            load_tile<D, BN, G::THREADS>(sv + slot * G::KV_SIZE, v + (n0 + BN) * sv_row, sv_row,
                                         S - n0 - BN);
        }
        commit_copies();
        wait_copies<1>();
        __syncthreads();
        if (nb == 0) {
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int ks = 0; ks < D / 16; ks++)
                    load_matrices(qf[t][ks], sq + (warp * G::WM + t * 16 + lane % 16) * LD +
                                                 ks * 16 + (lane / 16) * 8);
        }
        /* a warp whose queries all precede the block's keys has nothing to add */
        if (!(a.causal && n0 > warp_row + G::WM - 1)) {
            const uint16_t *skb = sk + (nb & 1) * G::KV_SIZE, *svb = sv + (nb & 1) * G::KV_SIZE;
            float s[MT][BN / 8][4] = {};
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
                for (int jj = 0; jj < BN / 16; jj++) {
                    uint32_t r[4];
                    load_matrices(r, skb + (jj * 16 + (mat / 2) * 8 + j8) * LD + ks * 16 +
                                         (mat % 2) * 8);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        mma<BF16>(s[t][2 * jj], qf[t][ks], r);
                        mma<BF16>(s[t][2 * jj + 1], qf[t][ks], r + 2);
                    }
                }
            const bool masked = n0 + BN > S || (a.causal && n0 + BN - 1 > warp_row);
            /* in the block: key c is past the end when c >= col_end, after query r (of the
               warp) when c - r > diag */
            const int col_end = (int)min(S - n0, (int64_t)BN);
            const int diag = a.causal ? (int)(warp_row - n0) : 1 << 30;
            uint32_t pa[MT][BN / 16][4];
#pragma unroll
            for (int t = 0; t < MT; t++) {
                const int64_t row0 = warp_row + t * 16 + lane / 4;
                float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[t][nt][e] * scale_log2;
                        if (masked) {
                            const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
                            const int r = t * 16 + lane / 4 + (e >> 1) * 8;
                            if (c >= col_end || c - r > diag) x = -INFINITY;
                        }
                        s[t][nt][e] = x;
                        bmax[e >> 1] = fmaxf(bmax[e >> 1], x);
                    }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 1));
                    bmax[hf] = fmaxf(bmax[hf], __shfl_xor_sync(0xffffffffu, bmax[hf], 2));
                    const float m_new = fmaxf(mx[t][hf], bmax[hf]);
                    const float m_use = m_new == -INFINITY ? 0.f : m_new;
                    const float alpha = exp2f(mx[t][hf] - m_use);
                    mx[t][hf] = m_new;
                    bmax[hf] = m_use;
                    l[t][hf] *= alpha;
#pragma unroll
                    for (int dn = 0; dn < D / 8; dn++)
                        o[t][dn][2 * hf] *= alpha, o[t][dn][2 * hf + 1] *= alpha;
                }
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float p = exp2f(s[t][nt][e] - bmax[e >> 1]);
                        l[t][e >> 1] += p;
                        s[t][nt][e] = p;
                    }
                if constexpr (DROP) {
                    const int odd = lane & 1;
                    uint32_t other[DW];
#pragma unroll
                    for (int w = 0; w < DW; w++)
                        other[w] = __shfl_xor_sync(0xffffffffu, dbits[t][w], 1);
#pragma unroll
                    for (int hf = 0; hf < 2; hf++) {
                        const uint64_t e0 = (uint64_t)((bh * T + row0 + hf * 8) * S + n0);
                        if (pipelined_drop) {
#pragma unroll
                            for (int nt = 0; nt < BN / 8; nt += 2) {
                                const int k = hf * (BN / 16) + nt / 2, sh = 4 * (k % 8) + 2 * odd;
                                const uint32_t own = dbits[t][k / 8] >> sh,
                                               got = other[k / 8] >> sh;
                                const uint32_t bits0 = odd ? got : own, bits1 = odd ? own : got;
                                if (!(bits0 & 1)) s[t][nt][2 * hf] = 0.f;
                                if (!(bits0 & 2)) s[t][nt][2 * hf + 1] = 0.f;
                                if (!(bits1 & 1)) s[t][nt + 1][2 * hf] = 0.f;
                                if (!(bits1 & 2)) s[t][nt + 1][2 * hf + 1] = 0.f;
                            }
                        } else {
#pragma unroll
                            for (int nt = 0; nt < BN / 8; nt++) {
                                bool k0, k1;
                                drop.keep2(e0 + nt * 8 + (lane % 4) * 2, k0, k1);
                                if (!k0) s[t][nt][2 * hf] = 0.f;
                                if (!k1) s[t][nt][2 * hf + 1] = 0.f;
                            }
                        }
                    }
                }
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    pa[t][kk][0] = pack2<BF16>(s[t][2 * kk][0], s[t][2 * kk][1]);
                    pa[t][kk][1] = pack2<BF16>(s[t][2 * kk][2], s[t][2 * kk][3]);
                    pa[t][kk][2] = pack2<BF16>(s[t][2 * kk + 1][0], s[t][2 * kk + 1][1]);
                    pa[t][kk][3] = pack2<BF16>(s[t][2 * kk + 1][2], s[t][2 * kk + 1][3]);
                }
            }
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                if (pipelined_drop && nb + 1 < blocks) { /* the next block's bits */
#pragma unroll
                    for (int t = 0; t < MT; t++)
#pragma unroll
                        for (int hf = 0; hf < 2; hf++)
                            next_bits[t][(hf * (BN / 16) + kk) / 8] |= draw(t, hf, kk, n0 + BN);
                }
#pragma unroll
                for (int dn = 0; dn < D / 16; dn++) {
                    uint32_t r[4];
                    load_matrices_transposed(r, svb + (kk * 16 + (mat % 2) * 8 + j8) * LD +
                                                    dn * 16 + (mat / 2) * 8);
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        mma<BF16>(o[t][2 * dn], pa[t][kk], r);
                        mma<BF16>(o[t][2 * dn + 1], pa[t][kk], r + 2);
                    }
                }
            }
            if (pipelined_drop) {
#pragma unroll
                for (int t = 0; t < MT; t++)
#pragma unroll
                    for (int w = 0; w < DW; w++) dbits[t][w] = next_bits[t][w], next_bits[t][w] = 0;
            }
        }
        __syncthreads(); /* the next block's loads overwrite this slot */
    }
    wait_copies<0>();

    uint16_t *out = at_bh<uint16_t>(a, OUT, b, h);
    float *lse = (float *)a.lse + bh * T;
    const int64_t so_row = a.stride[OUT][2];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float sum = l[t][hf];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int64_t row = warp_row + t * 16 + lane / 4 + hf * 8;
            if (row >= T) continue;
            const float inv = sum > 0.f ? drop_scale / sum : 0.f;
            uint16_t *dst = out + row * so_row + (lane % 4) * 2;
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++)
                *(uint32_t *)(dst + dn * 8) =
                    pack2<BF16>(o[t][dn][2 * hf] * inv, o[t][dn][2 * hf + 1] * inv);
            if (lane % 4 == 0) lse[row] = sum > 0.f ? (mx[t][hf] + log2f(sum)) * LN2 : -INFINITY;
        }
}

template <int D, int MT, int WARPS, int BN, bool BF16, bool DROP>
tl_status launch_forward_as(const tl_cuda_attention &a) {
    typedef FwdTile<D, MT, WARPS, BN> G;
    auto kernel = forward_mma<D, MT, WARPS, BN, BF16, DROP>;
    /* the limit is a fact of each device: the runtime remembers where it was raised */
    TL_TRY(tl_cuda_func_set_max_shared(a.at.device, (const void *)kernel, (int)G::SMEM, a.at.op));
    const int64_t blocks = tl_ceil_div(a.T, G::BM);
    if (blocks > MAX_GRID_Y || a.B * a.H > INT32_MAX)
        return tl_error(TL_ERR_ARGUMENT, "%s: %lld queries or %lld heads are too many", a.at.op,
                        (long long)a.T, (long long)(a.B * a.H));
    dim3 grid((unsigned)(a.B * a.H), (unsigned)blocks);
    kernel<<<grid, G::THREADS, G::SMEM, a.at.stream>>>(a, (float)(a.scale * M_LOG2E), dropout_of(a),
                                                       (float)dropout_scale(a));
    return tl_cuda_check_launch(a.at.op);
}

template <int D, int MT, int WARPS, int BN, bool BF16>
tl_status launch_forward(const tl_cuda_attention &a) {
    return a.dropout > 0 ? launch_forward_as<D, MT, WARPS, BN, BF16, true>(a)
                         : launch_forward_as<D, MT, WARPS, BN, BF16, false>(a);
}

/* ---- backward: one CTA per (b h, block of BN = WARPS * 16 keys), walking the query blocks of
   BM (q, dO, lse and delta double-buffered). Each warp: 16 keys, S^T = K Q^T and dP^T = V dO^T
   in registers, dV += (P Z)^T dO and dK += dS^T Q accumulated there; dS^T goes to shared memory
   for dQ = dS K (warps split BM x D), summed into the float32 workspace by atomics. -------- */
template <int D, int WARPS, int BM> struct BwdTile {
    static constexpr int THREADS = WARPS * 32, BN = WARPS * 16;
    static constexpr int LD = D + 8, DS_LD = BM + 8;
    static constexpr int KV_SIZE = BN * LD, Q_SIZE = BM * LD, DS_SIZE = BN * DS_LD;
    /* dQ: WARPS_M x WARPS_N warps, each MT m16 tiles x DN columns */
    static constexpr int WARPS_M = BM / 16 < WARPS ? BM / 16 : WARPS;
    static constexpr int WARPS_N = WARPS / WARPS_M, MT = BM / 16 / WARPS_M, DN = D / WARPS_N;
    static constexpr size_t SMEM =
        (size_t)(2 * KV_SIZE + 4 * Q_SIZE + DS_SIZE) * sizeof(uint16_t) + 4 * BM * sizeof(float);
    static_assert(DN % 16 == 0 && WARPS % WARPS_M == 0, "tile");
};

__device__ __forceinline__ void atomic_add2(float *p, float x, float y) {
#if __CUDA_ARCH__ >= 900
    atomicAdd((float2 *)p, make_float2(x, y));
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}

template <int D, int WARPS, int BM, bool BF16, bool KV_REGS, bool DROP>
__global__ void __launch_bounds__(WARPS * 32)
    backward_mma(const tl_cuda_attention a, float *dq_acc, float scale, float scale_log2,
                 Dropout drop, float drop_scale) {
    typedef BwdTile<D, WARPS, BM> G;
    constexpr int LD = G::LD, BN = G::BN, DS_LD = G::DS_LD;
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sk = smem, *sv = sk + G::KV_SIZE, *sq = sv + G::KV_SIZE;
    uint16_t *sdo = sq + 2 * G::Q_SIZE, *sds = sdo + 2 * G::Q_SIZE;
    float *slse = (float *)(sds + G::DS_SIZE), *sdelta = slse + 2 * BM;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mat = lane / 8, j8 = lane % 8;
    const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
    const int64_t T = a.T, S = a.S;
    const int64_t n0 = (int64_t)blockIdx.y * BN;
    const int64_t sq_row = a.stride[Q][2], sdo_row = a.stride[GRAD_OUT][2];
    const uint16_t *q = at_bh<const uint16_t>(a, Q, b, h);
    const uint16_t *dout = at_bh<const uint16_t>(a, GRAD_OUT, b, h);
    const float *lse = (const float *)a.lse + bh * T, *delta = (const float *)a.delta + bh * T;

    load_tile<D, BN, G::THREADS>(sk, at_bh<const uint16_t>(a, K, b, h) + n0 * a.stride[K][2],
                                 a.stride[K][2], S - n0);
    load_tile<D, BN, G::THREADS>(sv, at_bh<const uint16_t>(a, V, b, h) + n0 * a.stride[V][2],
                                 a.stride[V][2], S - n0);
    /* causal: the queries before n0 see none of the block's keys */
    const int64_t m_first = a.causal ? n0 / BM * BM : 0;
    auto load_queries = [&](int64_t m0, int slot) {
        load_tile<D, BM, G::THREADS>(sq + slot * G::Q_SIZE, q + m0 * sq_row, sq_row, T - m0);
        load_tile<D, BM, G::THREADS>(sdo + slot * G::Q_SIZE, dout + m0 * sdo_row, sdo_row, T - m0);
        for (int i = threadIdx.x; i < BM; i += G::THREADS) {
            const bool ok = m0 + i < T;
            copy4(slse + slot * BM + i, lse + (ok ? m0 + i : 0), ok);
            copy4(sdelta + slot * BM + i, delta + (ok ? m0 + i : 0), ok);
        }
    };
    if (m_first < T) load_queries(m_first, 0);
    commit_copies();

    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    uint32_t kf[KV_REGS ? D / 16 : 1][4], vf[KV_REGS ? D / 16 : 1][4];
    const int key_row = warp * 16; /* the warp's first key in the block */
    const int64_t kr0 = n0 + key_row + lane / 4;
    const bool want_dq = dq_acc != nullptr;

    /* dropout, S % 4 == 0: a Philox block is 4 keys of a query; lane L draws the block of query
       nt * 8 + L % 8, keys 4 (L / 8) .. of the warp's 16, for every n8 tile nt (4 bits at bit
       4 nt of dbits[nt / 8]). A query block's bits are drawn during the previous block's dV, dK
       products, which hide them (the first block's before the loop). */
    constexpr int DW = (BM / 2 + 31) / 32;
    uint32_t dbits[DW] = {}, next_bits[DW] = {};
    auto draw = [&](int nt, int64_t query0) -> uint32_t {
        const uint64_t e =
            (uint64_t)((bh * T + query0 + nt * 8 + lane % 8) * S + n0 + key_row + (lane / 8) * 4);
        return drop.keep4(e / 4) << (4 * (nt % 8));
    };
    const bool pipelined_drop = DROP && S % 4 == 0;
    if (pipelined_drop && m_first < T) {
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++) dbits[nt / 8] |= draw(nt, m_first);
    }

    int it = 0;
    for (int64_t m0 = m_first; m0 < T; m0 += BM, it++) {
        const int slot = it & 1;
        if (m0 + BM < T) load_queries(m0 + BM, slot ^ 1);
        commit_copies();
        wait_copies<1>();
        __syncthreads();
        if constexpr (KV_REGS) {
            if (it == 0) {
#pragma unroll
                for (int ks = 0; ks < D / 16; ks++) {
                    load_matrices(kf[ks],
                                  sk + (key_row + lane % 16) * LD + ks * 16 + (lane / 16) * 8);
                    load_matrices(vf[ks],
                                  sv + (key_row + lane % 16) * LD + ks * 16 + (lane / 16) * 8);
                }
            }
        }
        const uint16_t *sqb = sq + slot * G::Q_SIZE, *sdob = sdo + slot * G::Q_SIZE;
        const float *slb = slse + slot * BM, *sdb = sdelta + slot * BM;
        /* S^T = K Q^T and dP^T = V dO^T: 16 keys x BM queries */
        float st[BM / 8][4] = {}, dpt[BM / 8][4] = {};
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t ka[4], va[4];
            if constexpr (KV_REGS) {
#pragma unroll
                for (int r = 0; r < 4; r++) ka[r] = kf[ks][r], va[r] = vf[ks][r];
            } else {
                load_matrices(ka, sk + (key_row + lane % 16) * LD + ks * 16 + (lane / 16) * 8);
                load_matrices(va, sv + (key_row + lane % 16) * LD + ks * 16 + (lane / 16) * 8);
            }
#pragma unroll
            for (int jj = 0; jj < BM / 16; jj++) {
                uint32_t r[4];
                const int off = (jj * 16 + (mat / 2) * 8 + j8) * LD + ks * 16 + (mat % 2) * 8;
                load_matrices(r, sqb + off);
                mma<BF16>(st[2 * jj], ka, r);
                mma<BF16>(st[2 * jj + 1], ka, r + 2);
                load_matrices(r, sdob + off);
                mma<BF16>(dpt[2 * jj], va, r);
                mma<BF16>(dpt[2 * jj + 1], va, r + 2);
            }
        }
        /* P^T, (P Z)^T and dS^T = P^T (dP^T Z - delta) */
        const bool masked = n0 + BN > S || m0 + BM > T || (a.causal && n0 + BN - 1 > m0);
        /* key r (of the block) past the end when r >= row_end, query c when c >= col_end, key
           r after query c when r - c > diag */
        const int row_end = (int)min(S - n0, (int64_t)BN), col_end = (int)min(T - m0, (int64_t)BM);
        const int diag = a.causal ? (int)(m0 - n0) : 1 << 30;
        /* element (key lane / 4 + 8 (e / 2), query 2 (lane % 4) + e % 2) of an n8 tile: bit
           lane / 4 % 4 of the 4 its drawer (lane src) has for the tile */
        uint32_t fetched[4][DW];
        if constexpr (DROP) {
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int w = 0; w < DW; w++) {
                    const int src = (lane / 16 + (e >> 1) * 2) * 8 + (lane % 4) * 2 + (e & 1);
                    fetched[e][w] = __shfl_sync(0xffffffffu, dbits[w], src) >> (lane / 4 % 4);
                }
        }
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
                const int r = key_row + lane / 4 + (e >> 1) * 8;
                float p = exp2f(st[nt][e] * scale_log2 - slb[c] * LOG2E);
                if (masked && (r >= row_end || c >= col_end || r - c > diag)) p = 0.f;
                float z = 1.f;
                if constexpr (DROP) {
                    bool kept;
                    if (pipelined_drop) {
                        kept = (fetched[e][nt / 8] >> (4 * (nt % 8))) & 1;
                    } else {
                        kept = drop.keep((uint64_t)((bh * T + m0 + c) * S + n0 + r));
                    }
                    z = kept ? drop_scale : 0.f;
                }
                st[nt][e] = p * z;
                dpt[nt][e] = p * (dpt[nt][e] * z - sdb[c]);
            }
        }
        /* dV += (P Z)^T dO, dK += dS^T Q: A from registers (keys x queries), B = dO, Q */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            if (pipelined_drop && m0 + BM < T) { /* the next query block's bits */
                next_bits[kk / 4] |= draw(2 * kk, m0 + BM);
                next_bits[kk / 4] |= draw(2 * kk + 1, m0 + BM);
            }
            uint32_t pa[4], da[4];
            pa[0] = pack2<BF16>(st[2 * kk][0], st[2 * kk][1]);
            pa[1] = pack2<BF16>(st[2 * kk][2], st[2 * kk][3]);
            pa[2] = pack2<BF16>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
            pa[3] = pack2<BF16>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
            da[0] = pack2<BF16>(dpt[2 * kk][0], dpt[2 * kk][1]);
            da[1] = pack2<BF16>(dpt[2 * kk][2], dpt[2 * kk][3]);
            da[2] = pack2<BF16>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
            da[3] = pack2<BF16>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
            if (want_dq) { /* dS^T to shared memory, keys x queries */
                uint16_t *dst = sds + (key_row + lane / 4) * DS_LD + kk * 16 + (lane % 4) * 2;
                *(uint32_t *)dst = da[0];
                *(uint32_t *)(dst + 8 * DS_LD) = da[1];
                *(uint32_t *)(dst + 8) = da[2];
                *(uint32_t *)(dst + 8 * DS_LD + 8) = da[3];
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t r[4];
                const int off = (kk * 16 + (mat % 2) * 8 + j8) * LD + dn * 16 + (mat / 2) * 8;
                load_matrices_transposed(r, sdob + off);
                mma<BF16>(dv[2 * dn], pa, r);
                mma<BF16>(dv[2 * dn + 1], pa, r + 2);
                load_matrices_transposed(r, sqb + off);
                mma<BF16>(dk[2 * dn], da, r);
                mma<BF16>(dk[2 * dn + 1], da, r + 2);
            }
        }
        if (pipelined_drop) {
#pragma unroll
            for (int w = 0; w < DW; w++) dbits[w] = next_bits[w], next_bits[w] = 0;
        }
        if (want_dq) {
            __syncthreads();
            /* dQ [BM x D] += dS [BM x BN] K [BN x D] */
            const int wm = warp % G::WARPS_M, wn = warp / G::WARPS_M;
            float acc[G::MT][G::DN / 8][4] = {};
#pragma unroll
            for (int ks = 0; ks < BN / 16; ks++) {
                uint32_t af[G::MT][4];
#pragma unroll
                for (int t = 0; t < G::MT; t++)
                    load_matrices_transposed(af[t], sds + (ks * 16 + (mat / 2) * 8 + j8) * DS_LD +
                                                        (wm * G::MT + t) * 16 + (mat % 2) * 8);
#pragma unroll
                for (int dn = 0; dn < G::DN / 16; dn++) {
                    uint32_t r[4];
                    load_matrices_transposed(r, sk + (ks * 16 + (mat % 2) * 8 + j8) * LD +
                                                    wn * G::DN + dn * 16 + (mat / 2) * 8);
#pragma unroll
                    for (int t = 0; t < G::MT; t++) {
                        mma<BF16>(acc[t][2 * dn], af[t], r);
                        mma<BF16>(acc[t][2 * dn + 1], af[t], r + 2);
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < G::MT; t++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int64_t row = m0 + (wm * G::MT + t) * 16 + lane / 4 + hf * 8;
                    if (row >= T) continue;
                    float *dst = dq_acc + (bh * T + row) * D + wn * G::DN + (lane % 4) * 2;
#pragma unroll
                    for (int dn = 0; dn < G::DN / 8; dn++)
                        atomic_add2(dst + dn * 8, acc[t][dn][2 * hf] * scale,
                                    acc[t][dn][2 * hf + 1] * scale);
                }
        }
        __syncthreads(); /* the next loads overwrite this slot, the next dS^T sds */
    }
    wait_copies<0>();

    /* dK = scale dS^T Q, dV */
#pragma unroll
    for (int which = 0; which < 2; which++) {
        const int op = which ? GRAD_V : GRAD_K;
        if (!a.data[op]) continue;
        uint16_t *g = at_bh<uint16_t>(a, op, b, h);
        const float f = which ? 1.f : scale;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t row = kr0 + hf * 8;
            if (row >= S) continue;
            uint16_t *dst = g + row * a.stride[op][2] + (lane % 4) * 2;
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++) {
                const float *acc = which ? dv[dn] : dk[dn];
                *(uint32_t *)(dst + dn * 8) = pack2<BF16>(acc[2 * hf] * f, acc[2 * hf + 1] * f);
            }
        }
    }
}

template <int D, int WARPS, int BM, bool BF16, bool KV_REGS, bool DROP>
tl_status launch_backward_as(const tl_cuda_attention &a, float *dq_acc) {
    typedef BwdTile<D, WARPS, BM> G;
    auto kernel = backward_mma<D, WARPS, BM, BF16, KV_REGS, DROP>;
    /* the limit is a fact of each device: the runtime remembers where it was raised */
    TL_TRY(tl_cuda_func_set_max_shared(a.at.device, (const void *)kernel, (int)G::SMEM, a.at.op));
    const int64_t blocks = tl_ceil_div(a.S, G::BN);
    if (blocks > MAX_GRID_Y || a.B * a.H > INT32_MAX)
        return tl_error(TL_ERR_ARGUMENT, "%s: %lld keys or %lld heads are too many", a.at.op,
                        (long long)a.S, (long long)(a.B * a.H));
    dim3 grid((unsigned)(a.B * a.H), (unsigned)blocks);
    kernel<<<grid, G::THREADS, G::SMEM, a.at.stream>>>(a, dq_acc, (float)a.scale,
                                                       (float)(a.scale * M_LOG2E), dropout_of(a),
                                                       (float)dropout_scale(a));
    return tl_cuda_check_launch(a.at.op);
}

template <int D, int WARPS, int BM, bool BF16, bool KV_REGS>
tl_status launch_backward(const tl_cuda_attention &a, float *dq_acc) {
    return a.dropout > 0 ? launch_backward_as<D, WARPS, BM, BF16, KV_REGS, true>(a, dq_acc)
                         : launch_backward_as<D, WARPS, BM, BF16, KV_REGS, false>(a, dq_acc);
}

/* grad_q (strided, dtype) = the float32 workspace [B, H, T, D], 8 elements a thread: two 16-byte
   reads, one 16-byte write (the path's rows are whole vectors: D a multiple of 8, strides of
   multiples of 8 elements, 16-byte aligned) */
template <typename E>
__global__ void store_dq(const tl_cuda_attention a, const float *dq_acc, int64_t total) {
    typedef typename E::T T;
    const int64_t vectors = total / 8, per_row = a.D / 8, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < vectors; v += stride) {
        const int64_t row = v / per_row, d = (v - row * per_row) * 8, i = row % a.T, bh = row / a.T;
        const float4 lo = *(const float4 *)(dq_acc + v * 8),
                     hi = *(const float4 *)(dq_acc + v * 8 + 4);
        const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        uint4 out;
        T *t = (T *)&out;
#pragma unroll
        for (int j = 0; j < 8; j++) t[j] = E::store(x[j]);
        T *g = at_bh<T>(a, GRAD_Q, bh / a.H, bh % a.H);
        *(uint4 *)(g + i * a.stride[GRAD_Q][2] + d) = out;
    }
}

/* ---- the choice of path ---------------------------------------------------------------- */
bool fits_mma(const tl_cuda_attention &a) {
    if (a.dtype != TL_CUDA_BF16 && a.dtype != TL_CUDA_F16) return false;
    if (a.D != 32 && a.D != 64 && a.D != 128) return false;
    if (a.S == 0) return false;
    for (int i = 0; i < TL_CUDA_ATT_OPERANDS; i++) {
        if (!a.data[i]) continue;
        if ((uintptr_t)a.data[i] % 16) return false;
        for (int d = 0; d < 3; d++)
            if (a.stride[i][d] % 8) return false;
    }
    return true;
}

/* Tiles measured on an H100 (bf16, B 64, H 6, T = S 256 and B 16, T = S 1024; causal and not):
   the forward best with 4 warps of 16 queries (BM 64) and key blocks of 64 (32 for D 128, whose
   registers are tighter); the backward with 4 warps of 16 keys (BN 64) and query steps of 64
   (32 for D 128), 8 warps (BN 128) for D 64 without the mask, where every key block sees all
   query blocks. */

/* The paths of the tensor-core kernels (every one: bfloat16 or float16, head dim 32, 64 or 128,
   operands 16-byte aligned with strides of multiples of 8 elements), each with the condition
   that picks it; a run takes a tile and, with dropout, a way of drawing the mask. */
enum {
    FWD_D32,
    FWD_D64,
    FWD_D128,
    FWD_DROPOUT_AHEAD,
    FWD_DROPOUT_PER_ELEMENT,
    BWD_D32,
    BWD_D64_WIDE,
    BWD_D64_CAUSAL,
    BWD_D64_CAUSAL_DROPOUT,
    BWD_D128,
    BWD_DROPOUT_AHEAD,
    BWD_DROPOUT_PER_ELEMENT,
};
constexpr tl_dtype_set HALVES = TL_DTYPES_BF16 | TL_DTYPES_F16;
const tl_kernel_variant mma_variants[] = {
    TL_VARIANT(scaled_dot_product_attention, HALVES, "mma_d32",
               "head dim 32: 4 warps of 16 queries, key blocks of 64"),
    TL_VARIANT(scaled_dot_product_attention, HALVES, "mma_d64",
               "head dim 64: 4 warps of 16 queries, key blocks of 64"),
    TL_VARIANT(scaled_dot_product_attention, HALVES, "mma_d128",
               "head dim 128: 4 warps of 16 queries, key blocks of 32"),
    TL_VARIANT(scaled_dot_product_attention, HALVES, "dropout_ahead",
               "dropout with S % 4 == 0: a key block's mask drawn during the previous block's "
               "products, 4 keys a Philox draw"),
    TL_VARIANT(scaled_dot_product_attention, HALVES, "dropout_per_element",
               "dropout with S % 4 != 0: each kept element's uniform drawn where it is used"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "mma_d32",
               "head dim 32: 4 warps of 16 keys, query steps of 64"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "mma_d64_wide",
               "head dim 64, not causal: 8 warps of 16 keys, query steps of 64"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "mma_d64_causal",
               "head dim 64, causal, no dropout: 4 warps of 16 keys, query steps of 64"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "mma_d64_causal_dropout",
               "head dim 64, causal, dropout: 4 warps of 16 keys, query steps of 32"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "mma_d128",
               "head dim 128: 4 warps of 16 keys, query steps of 32, dK and dV in shared memory"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "dropout_ahead",
               "dropout with S % 4 == 0: a query block's mask drawn during the previous block's "
               "products"),
    TL_VARIANT(scaled_dot_product_attention_backward, HALVES, "dropout_per_element",
               "dropout with S % 4 != 0: each kept element's uniform drawn where it is used"),
};

void ran(int variant, const tl_cuda_attention &a) {
    tl_variant_ran(&mma_variants[variant], (tl_dtype)a.dtype);
}

template <bool BF16> tl_status forward_mma_run(const tl_cuda_attention &a) {
    if (a.dropout > 0) ran(a.S % 4 == 0 ? FWD_DROPOUT_AHEAD : FWD_DROPOUT_PER_ELEMENT, a);
    if (a.D == 32) return ran(FWD_D32, a), launch_forward<32, 1, 4, 64, BF16>(a);
    if (a.D == 64) return ran(FWD_D64, a), launch_forward<64, 1, 4, 64, BF16>(a);
    return ran(FWD_D128, a), launch_forward<128, 1, 4, 32, BF16>(a);
}

template <bool BF16> tl_status backward_mma_run(const tl_cuda_attention &a, float *dq_acc) {
    if (a.dropout > 0) ran(a.S % 4 == 0 ? BWD_DROPOUT_AHEAD : BWD_DROPOUT_PER_ELEMENT, a);
    if (a.D == 32) return ran(BWD_D32, a), launch_backward<32, 4, 64, BF16, true>(a, dq_acc);
    if (a.D == 64 && !a.causal)
        return ran(BWD_D64_WIDE, a), launch_backward<64, 8, 64, BF16, true>(a, dq_acc);
    if (a.D == 64 && a.dropout > 0)
        return ran(BWD_D64_CAUSAL_DROPOUT, a), launch_backward<64, 4, 32, BF16, true>(a, dq_acc);
    if (a.D == 64) return ran(BWD_D64_CAUSAL, a), launch_backward<64, 4, 64, BF16, true>(a, dq_acc);
    return ran(BWD_D128, a), launch_backward<128, 4, 32, BF16, false>(a, dq_acc);
}

} // namespace

TL_VARIANT_TABLE(tl_cuda_attention_mma_variants, TL_DEVICE_CUDA, mma_variants);

bool tl_attention_fits_mma(const tl_cuda_attention &a) {
    return fits_mma(a);
}

tl_status tl_attention_forward_mma(const tl_cuda_attention &a) {
    return a.dtype == TL_CUDA_BF16 ? forward_mma_run<true>(a) : forward_mma_run<false>(a);
}

tl_status tl_attention_backward_mma(const tl_cuda_attention &a, bool want_q) {
    tl_cuda_scratch dq;
    const int64_t total = a.B * a.H * a.T * a.D;
    if (want_q && total > 0) {
        TL_TRY(dq.get(a.at, (size_t)total * sizeof(float)));
        TL_CUDA_TRY(cudaMemsetAsync(dq.ptr, 0, (size_t)total * sizeof(float), a.at.stream), a.at.op,
                    "cudaMemsetAsync");
    }
    float *dq_acc = want_q && total > 0 ? (float *)dq.ptr : nullptr;
    TL_TRY(a.dtype == TL_CUDA_BF16 ? backward_mma_run<true>(a, dq_acc)
                                   : backward_mma_run<false>(a, dq_acc));
    if (!dq_acc) return TL_OK;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(total / 8, 256), a.at.sm_count);
    if (a.dtype == TL_CUDA_BF16)
        store_dq<tl_elem<TL_CUDA_BF16>><<<grid, 256, 0, a.at.stream>>>(a, dq_acc, total);
    else
        store_dq<tl_elem<TL_CUDA_F16>><<<grid, 256, 0, a.at.stream>>>(a, dq_acc, total);
    return tl_cuda_check_launch(a.at.op);
}
