# bench/hopper_wgmma_gen.py: writes bench/hopper_wgmma_n256.h, the inline-asm wrapper for one m64n256k16 bf16 wgmma (128 f32 accumulators per thread).
n = 128
regs = ", ".join("%%%d" % i for i in range(n))
outs = ", ".join('"+f"(d[%d])' % i for i in range(n))
src = f'''/* bench/hopper_wgmma_n256.h: written by bench/hopper_wgmma_gen.py: one wgmma.mma_async m64n256k16 f32 += bf16 x bf16, both operands from shared memory. */
#pragma once
/* d: this thread's 128 accumulators; da, db: shared-memory matrix descriptors; scale_d 0 overwrites d
   (D = A B), 1 accumulates (D = A B + D); TRANS_B 1 reads B MN-major (N contiguous) instead of K-major. */
template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float *d, uint64_t da, uint64_t db, int scale_d) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n+2}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{regs}}}, %{n}, %{n+1}, p, 1, 1, 0, %{n+3};\\n}}\\n"
                 : {outs}
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}}
'''
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hopper_wgmma_n256.h"), "w").write(src)
