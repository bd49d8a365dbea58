/* The Hopper GEMM core's host side and schedule kernel: tensor maps made on the host, the
   segments' tile counts and per-segment maps made on the device from the ends, then the
   persistent kernel of hopper_gemm_kernel.cuh. Built for sm_90a alone (CMakeLists.txt). */
#include <algorithm>
#include <atomic>
#include <cstring>

#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/hopper_gemm.h"
#include "kernels/cuda/hopper_gemm_kernel.cuh"
#include "kernels/cuda/hopper_maps.cuh"

/* ---- the schedule kernel ------------------------------------------------------------------ */
constexpr int TL_HOP_SCHEDULE_THREADS = 1024;
/* segments a thread of the schedule takes in its scans (up to TL_HOPPER_MAX_GROUPS + 1 in all) */
constexpr int TL_HOP_SCHEDULE_ITEMS =
    (TL_HOPPER_MAX_GROUPS + 1 + TL_HOP_SCHEDULE_THREADS - 1) / TL_HOP_SCHEDULE_THREADS;

/* The first failing check since the host last looked wins (tl_cuda_fault). */
__device__ void tl_hopper_report(tl_cuda_fault *fault, unsigned int id, long long value,
                                 long long position) {
    if (atomicCAS(&fault->id, 0u, id) == 0u) {
        fault->value = value;
        fault->position = position;
        __threadfence_system();
    }
}

struct tl_hopper_max {
    __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

/* One block: reads the ends (checking them where asked, then each clamped into [the previous end,
   rows]: a prefix max), writes each segment's bounds and first tile (a prefix sum of the tile
   counts), the total, and the per-segment tensor maps: copies of the templates with the segment's
   end as the rows' extent, so that TMA zero-fills loads past the end and clips stores there. */
__global__ void __launch_bounds__(TL_HOP_SCHEDULE_THREADS)
    tl_hopper_schedule_kernel(tl_hopper_walk walk, const void *ends, int ends_i64, int rows,
                              tl_cuda_fault *fault, unsigned int range_id, unsigned int steps_id,
                              const __grid_constant__ CUtensorMap first_template,
                              const __grid_constant__ CUtensorMap second_template, int *tile_starts,
                              int2 *bounds, CUtensorMap *maps) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();
#else
    typedef cub::BlockScan<int, TL_HOP_SCHEDULE_THREADS> scan;
    __shared__ typename scan::TempStorage scan_storage;
    __shared__ int end[TL_HOPPER_MAX_GROUPS + 1];
    __shared__ alignas(128) CUtensorMap slot[TL_HOP_SCHEDULE_THREADS / 32];
    for (int g = threadIdx.x; g < walk.segments; g += blockDim.x) {
        if (g == walk.groups) { /* ROWS: the zero tail runs to the last row */
            end[g] = rows;
            continue;
        }
        const long long e = ends_i64 ? ((const long long *)ends)[g] : ((const int *)ends)[g];
        end[g] = (int)(e < 0 ? 0 : e > rows ? rows : e);
        if (!fault) continue;
        /* an end outside [0, rows], or a step from the previous end outside it */
        if (e < 0 || e > rows) tl_hopper_report(fault, range_id, e, g);
        if (g == 0) continue;
        const long long before =
            ends_i64 ? ((const long long *)ends)[g - 1] : ((const int *)ends)[g - 1];
        if (e - before < 0 || e - before > rows)
            tl_hopper_report(fault, steps_id, e - before, g - 1);
    }
    __syncthreads();
    /* thread t's segments: t * ITEMS .. (blocked, as cub's scans take them) */
    const int first = threadIdx.x * TL_HOP_SCHEDULE_ITEMS;
    int item[TL_HOP_SCHEDULE_ITEMS];
    for (int i = 0; i < TL_HOP_SCHEDULE_ITEMS; i++)
        item[i] = first + i < walk.segments ? end[first + i] : 0;
    scan(scan_storage).InclusiveScan(item, item, tl_hopper_max());
    __syncthreads();
    for (int i = 0; i < TL_HOP_SCHEDULE_ITEMS; i++)
        if (first + i < walk.segments) end[first + i] = item[i];
    __syncthreads();
    const int tiles_n = (walk.n + TL_HOP_BN - 1) / TL_HOP_BN;
    const int tiles_m = (walk.m + TL_HOP_BM - 1) / TL_HOP_BM;
    for (int i = 0; i < TL_HOP_SCHEDULE_ITEMS; i++) {
        const int s = first + i;
        item[i] = 0;
        if (s >= walk.segments) continue;
        const int start = s > 0 ? end[s - 1] : 0, e = end[s];
        bounds[s] = make_int2(start, e);
        item[i] =
            walk.kind == 0 ? (e - start + TL_HOP_BM - 1) / TL_HOP_BM * tiles_n : tiles_m * tiles_n;
    }
    int total;
    scan(scan_storage).ExclusiveSum(item, item, total);
    for (int i = 0; i < TL_HOP_SCHEDULE_ITEMS; i++)
        if (first + i < walk.segments) tile_starts[first + i] = item[i];
    if (threadIdx.x == 0) tile_starts[walk.segments] = total;
    /* the maps, a warp each */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int per_segment = walk.kind == 0 ? 1 : 2;
    for (int s = warp; s < walk.segments; s += blockDim.x / 32) {
        for (int which = 0; which < per_segment; which++) {
            const CUtensorMap *from = which == 0 ? &first_template : &second_template;
            ((uint32_t *)&slot[warp])[lane] = ((const uint32_t *)from)[lane];
            __syncwarp();
            if (lane == 0) tl_tensormap_set_dim<1>(&slot[warp], (uint32_t)max(end[s], 1));
            __syncwarp();
            tl_tensormap_publish((CUtensorMap *)&maps[per_segment * s + which], &slot[warp]);
            __syncwarp();
        }
    }
#endif
}

/* ---- host --------------------------------------------------------------------------------- */
typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled (through the runtime: no link to libcuda), or NULL. */
static encode_tiled_fn encode_tiled() {
    static const encode_tiled_fn fn = []() -> encode_tiled_fn {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                             &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            return nullptr;
        return (encode_tiled_fn)p;
    }();
    return fn;
}

tl_status tl_hopper_make_map(bool half, const void *data, int64_t rows, int64_t cols, int64_t ld,
                             int64_t matrices, int64_t stride, int box_rows, const char *op,
                             CUtensorMap *map) {
    encode_tiled_fn encode = encode_tiled();
    if (!encode)
        return tl_error(TL_ERR_RUNTIME, "%s: the driver has no cuTensorMapEncodeTiled", op);
    if (matrices == 1) stride = ld * std::max<int64_t>(rows, 1);
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)std::max<int64_t>(rows, 1),
                                (cuuint64_t)matrices};
    const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)stride * 2};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1}, steps[3] = {1, 1, 1};
    CUresult r =
        encode(map, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
               (void *)data, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return tl_error(TL_ERR_RUNTIME,
                        "%s: cuTensorMapEncodeTiled failed (%d) for a [%lld, %lld] operand", op,
                        (int)r, (long long)rows, (long long)cols);
    return TL_OK;
}

/* g's operand as such a map */
static tl_status make_map(const tl_hopper_gemm *g, const void *data, int64_t rows, int64_t cols,
                          int64_t ld, int64_t matrices, int64_t stride, int box_rows,
                          const char *op, CUtensorMap *map) {
    return tl_hopper_make_map(g->half, data, rows, cols, ld, matrices, stride, box_rows, op, map);
}

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

/* per device: 0 not asked yet, 1 a Hopper GPU the core runs on, 2 not */
static std::atomic<int> hopper_devices[TL_CUDA_MAX_DEVICES];

extern "C" bool tl_hopper_gemm_available(int device) {
    if (device < 0 || device >= TL_CUDA_MAX_DEVICES) return false;
    int known = hopper_devices[device].load(std::memory_order_relaxed);
    if (known == 0) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
                cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
                cudaSuccess) {
            cudaGetLastError();
            return false; /* asked again next time */
        }
        known = major == 9 && minor == 0 && encode_tiled() != nullptr ? 1 : 2;
        hopper_devices[device].store(known, std::memory_order_relaxed);
    }
    return known == 1;
}

static bool fits(const tl_hopper_operand *o, bool stacked) {
    return o->data && (uintptr_t)o->data % 16 == 0 && o->ld > 0 && o->ld % 8 == 0 &&
           o->ld < ((int64_t)1 << 31) &&
           (!stacked || (o->group_stride % 8 == 0 && o->group_stride >= 0));
}

extern "C" bool tl_hopper_gemm_takes(int device, const tl_hopper_gemm *g) {
    const int64_t limit = (int64_t)1 << 31;
    if (g->m <= 0 || g->n <= 0 || g->k < 0 || g->m >= limit || g->n >= limit || g->k >= limit)
        return false;
    if (g->kind == TL_HOPPER_INPLACE)
        return !g->a_m_major && g->k == g->n && g->n <= TL_HOPPER_MAX_INPLACE_N &&
               fits(&g->a, false) && fits(&g->b, false) && tl_hopper_gemm_available(device);
    if (g->groups < 1 || g->groups > TL_HOPPER_MAX_GROUPS || !g->ends) return false;
    const bool rows = g->kind == TL_HOPPER_ROWS;
    if (rows ? g->a_m_major : !(g->a_m_major && g->b_n_major)) return false;
    if (!fits(&g->a, false) || !fits(&g->b, rows) || !fits(&g->c, !rows)) return false;
    return tl_hopper_gemm_available(device);
}

/* grid CTAs; cooperative: all resident at once (INPLACE's CTAs wait for each other) */
template <bool HALF, int TRANS_A, int TRANS_B>
static tl_status launch(int device, cudaStream_t stream, const CUtensorMap *maps,
                        const tl_hopper_walk &walk, int grid, bool cooperative, const char *op) {
    auto kernel = tl_hopper_gemm_kernel<HALF, TRANS_A, TRANS_B>;
    TL_TRY(tl_cuda_func_set_max_shared(device, (const void *)kernel, (int)TL_HOP_SMEM, op));
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attribute[1];
    config.gridDim = dim3((unsigned)grid), config.blockDim = dim3(TL_HOP_THREADS);
    config.dynamicSmemBytes = TL_HOP_SMEM, config.stream = stream;
    if (cooperative) {
        attribute[0].id = cudaLaunchAttributeCooperative;
        attribute[0].val.cooperative = 1;
        config.attrs = attribute, config.numAttrs = 1;
    }
    TL_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, maps[0], maps[1], maps[2], walk), op,
                "cudaLaunchKernelEx");
    return tl_cuda_check_launch(op);
}

template <bool HALF>
static tl_status launch_layout(int device, cudaStream_t stream, const tl_hopper_gemm *g,
                               const CUtensorMap *maps, const tl_hopper_walk &walk, int grid,
                               bool cooperative, const char *op) {
    if (g->a_m_major) return launch<HALF, 1, 1>(device, stream, maps, walk, grid, cooperative, op);
    if (g->b_n_major) return launch<HALF, 0, 1>(device, stream, maps, walk, grid, cooperative, op);
    return launch<HALF, 0, 0>(device, stream, maps, walk, grid, cooperative, op);
}

/* INPLACE: tiles_n CTAs take the tiles of a row block in the same round (the grid a multiple of
   tiles_n), each counting its reads in the block's counter that the others wait on before storing:
   two rounds' worth of counters (tl_hopper_walk's slots), whatever the rows; no schedule */
static tl_status run_in_place(int device, cudaStream_t stream, const tl_hopper_gemm *g,
                              const char *op) {
    CUtensorMap maps[3];
    TL_TRY(make_map(g, g->a.data, g->m, g->k, g->a.ld, 1, 0, TL_HOP_BM, op, &maps[0]));
    TL_TRY(g->b_n_major
               ? make_map(g, g->b.data, g->k, g->n, g->b.ld, 1, 0, 64, op, &maps[1])
               : make_map(g, g->b.data, g->n, g->k, g->b.ld, 1, 0, TL_HOP_BN, op, &maps[1]));
    TL_TRY(make_map(g, g->a.data, g->m, g->n, g->a.ld, 1, 0, 64, op, &maps[2]));
    const int64_t row_blocks = ceil_div(g->m, TL_HOP_BM);
    const int tiles_n = (int)ceil_div(g->n, TL_HOP_BN);
    const int64_t tiles = row_blocks * tiles_n;
    const int64_t resident = tl_cuda_sm_count(device) / tiles_n * tiles_n;
    const int grid = (int)std::max<int64_t>(tiles_n, std::min(tiles, resident));
    const int slots = 2 * (grid / tiles_n);
    const size_t bytes = (size_t)slots * sizeof(unsigned);
    void *counters = nullptr;
    TL_TRY(tl_cuda_malloc(device, bytes, op, &counters));
    tl_status status = TL_OK;
    cudaError_t err = cudaMemsetAsync(counters, 0, bytes, stream);
    if (err != cudaSuccess) status = tl_cuda_fail(err, op, "cudaMemsetAsync");
    if (status == TL_OK) {
        tl_hopper_walk walk = {};
        walk.kind = 2;
        walk.m = (int)g->m, walk.n = (int)g->n, walk.k = (int)g->k;
        walk.rows_read = (unsigned *)counters;
        walk.slots = slots;
        status = g->half ? launch_layout<true>(device, stream, g, maps, walk, grid, true, op)
                         : launch_layout<false>(device, stream, g, maps, walk, grid, true, op);
    }
    tl_cuda_free(device, counters);
    return status;
}

extern "C" tl_status tl_hopper_gemm_run(int device, cudaStream_t stream, const tl_hopper_gemm *g,
                                        const char *op) {
    if (g->kind == TL_HOPPER_INPLACE) return run_in_place(device, stream, g, op);
    const bool rows = g->kind == TL_HOPPER_ROWS;
    const int64_t groups = g->groups, segments = groups + (rows ? 1 : 0);
    /* the maps: A, B and C (ROWS: A [m, k], B [groups][k, n] or [n, k], C [m, n] as a template;
       REDUCTION: A [k, m] and B [k, n] as templates, C [groups][m, n]) */
    CUtensorMap maps[3];
    const int b_box = g->b_n_major ? 64 : TL_HOP_BN;
    if (rows) {
        TL_TRY(make_map(g, g->a.data, g->m, g->k, g->a.ld, 1, 0, TL_HOP_BM, op, &maps[0]));
        TL_TRY(g->b_n_major ? make_map(g, g->b.data, g->k, g->n, g->b.ld, groups, g->b.group_stride,
                                       64, op, &maps[1])
                            : make_map(g, g->b.data, g->n, g->k, g->b.ld, groups, g->b.group_stride,
                                       b_box, op, &maps[1]));
        TL_TRY(make_map(g, g->c.data, g->m, g->n, g->c.ld, 1, 0, 64, op, &maps[2]));
    } else {
        TL_TRY(make_map(g, g->a.data, g->k, g->m, g->a.ld, 1, 0, 64, op, &maps[0]));
        TL_TRY(make_map(g, g->b.data, g->k, g->n, g->b.ld, 1, 0, 64, op, &maps[1]));
        TL_TRY(make_map(g, g->c.data, g->m, g->n, g->c.ld, groups, g->c.group_stride, 64, op,
                        &maps[2]));
    }

    /* the workspace: per-segment maps (128-byte aligned), first tiles, bounds, staged ends */
    const size_t per_segment = rows ? 1 : 2;
    const size_t map_bytes = (size_t)segments * per_segment * sizeof(CUtensorMap);
    const size_t starts_bytes = (size_t)(segments + 1) * sizeof(int);
    const size_t bounds_bytes = (size_t)segments * sizeof(int2);
    const size_t ends_bytes = g->ends_on_host ? (size_t)groups * (g->ends_i64 ? 8 : 4) : 0;
    const size_t starts_at = map_bytes, bounds_at = (starts_at + starts_bytes + 15) / 16 * 16;
    const size_t ends_at = (bounds_at + bounds_bytes + 15) / 16 * 16;
    void *work = nullptr;
    TL_TRY(tl_cuda_malloc(device, ends_at + ends_bytes, op, &work));
    char *w = (char *)work;
    const void *ends = g->ends;
    tl_status status = TL_OK;
    if (g->ends_on_host) {
        status = tl_cuda_stage(device, stream, w + ends_at, g->ends, ends_bytes, op, "the ends");
        ends = w + ends_at;
    }

    tl_hopper_walk walk = {};
    walk.kind = rows ? 0 : 1;
    walk.m = (int)g->m, walk.n = (int)g->n, walk.k = (int)g->k;
    walk.groups = (int)groups, walk.segments = (int)segments;
    walk.tile_starts = (const int *)(w + starts_at);
    walk.bounds = (const int2 *)(w + bounds_at);
    walk.maps = (const CUtensorMap *)w;
    if (status == TL_OK) {
        const CUtensorMap &first = rows ? maps[2] : maps[0], &second = rows ? maps[2] : maps[1];
        tl_hopper_schedule_kernel<<<1, TL_HOP_SCHEDULE_THREADS, 0, stream>>>(
            walk, ends, g->ends_i64, (int)(rows ? g->m : g->k), g->fault, g->range_id, g->steps_id,
            first, second, (int *)(w + starts_at), (int2 *)(w + bounds_at), (CUtensorMap *)w);
        status = tl_cuda_check_launch(op);
    }
    if (status == TL_OK) {
        /* a bound on the tiles (each segment adds at most one partial tile row): the grid */
        const int64_t tiles_n = ceil_div(g->n, TL_HOP_BN);
        const int64_t bound = rows ? (ceil_div(g->m, TL_HOP_BM) + segments) * tiles_n
                                   : groups * ceil_div(g->m, TL_HOP_BM) * tiles_n;
        const int grid =
            (int)std::max<int64_t>(1, std::min<int64_t>(bound, tl_cuda_sm_count(device)));
        status = g->half ? launch_layout<true>(device, stream, g, maps, walk, grid, false, op)
                         : launch_layout<false>(device, stream, g, maps, walk, grid, false, op);
    }
    tl_cuda_free(device, work); /* back to the cache behind the kernels, in stream order */
    return status;
}
