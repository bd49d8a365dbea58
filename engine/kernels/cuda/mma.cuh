/* Internal: the PTX helpers of the tensor-core kernels (cuda/block_sparse.cu, cuda/attention.cu):
   cp.async copies global -> shared memory, ldmatrix loads of 8 x 8 b16 matrices, mma.sync
   m16n8k16 on bf16/f16 with float accumulators, and float pairs packed to bf16x2/f16x2 (sm_80
   and later). */
#ifndef TLUA_CUDA_MMA_CUH
#define TLUA_CUDA_MMA_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t shared_address(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, or zeros when !valid (src is then not read). */
__device__ __forceinline__ void copy16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
}

/* 4 bytes global -> shared, or zeros when !valid. */
__device__ __forceinline__ void copy4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void commit_copies() {
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most N of this thread's committed groups are in flight. */
template <int N> __device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8 x 8 matrices, lanes 8 i .. 8 i + 7 giving the row addresses of matrix i. */
__device__ __forceinline__ void load_matrices(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

/* The same, each matrix transposed. */
__device__ __forceinline__ void load_matrices_transposed(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

/* c += a (16 x 16, row) b (16 x 8, col), float accumulators. */
template <bool BF16>
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* lo and hi rounded (to nearest even) to bf16 or f16, lo in the low half: the register of an
   mma operand holding two consecutive elements. */
template <bool BF16> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t d;
    if constexpr (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

#endif
