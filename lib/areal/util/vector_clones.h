// Loops the compiler vectorizes for the CPU it runs on (the CPU kernels: generation's
// attention and sampling, the fused RMSNorm).
//
// A function marked AREAL_VECTOR_CLONES is compiled for AVX-512, for AVX2 and for the
// baseline, one chosen when the library loads (GCC's target_clones); its loops are
// written over GCC's vector types (the compiler picks the instructions, no intrinsics).
// Elsewhere: the baseline alone. (Features, not `arch=` clones: those are chosen by the
// CPU's model, and a newer CPU would get the baseline.) A helper of the baseline target
// is not inlined into the clones, so each such function writes its loops out.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define AREAL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AREAL_VECTOR_CLONES
#endif
