// Per-ISA tables of vec_dot kernels (each ISA's file is compiled with its
// own target flags; vec_dot.cc picks one at run time).
#ifndef FERRY_BACKENDS_HOST_INTERNAL_VEC_DOT_KERNELS_H_
#define FERRY_BACKENDS_HOST_INTERNAL_VEC_DOT_KERNELS_H_

#include "ferry/backends/host/vec_dot.h"
#include "ferry/quant/quant_type.h"

namespace ferry::quant::quant_internal {

// Each returns the kernel for `weight`, or nullptr if that ISA has none.
VecDotFn ScalarVecDot(QuantType weight);
VecDotFn Avx2VecDot(QuantType weight);
VecDotFn Avx512VecDot(QuantType weight);
// The AVX-512 kernels built on SIMDe for CPUs without AVX-512 (tests only:
// :vec_dot_avx512_emulated).
namespace emulated {
VecDotFn Avx512VecDot(QuantType weight);
}  // namespace emulated

// The K and iq4 weight formats' kernels (q2_K..q6_K, iq4_nl, iq4_xs), which
// ScalarVecDot and Avx2VecDot hand out; AVX-512 takes the AVX2 ones.
VecDotFn ScalarVecDotK(QuantType weight);
VecDotFn Avx2VecDotK(QuantType weight);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_BACKENDS_HOST_INTERNAL_VEC_DOT_KERNELS_H_
