// AVX2 rounding of activations to 8-bit blocks (q8_0, q8_1), bit-identical
// to the scalar QuantizeQ8Block in quantize.cc: the same scale, the same
// round-half-away-from-zero. Compiled with its own target flags: call only
// where IsaSupported(Isa::kAvx2).
#ifndef FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_
#define FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_

#include <cstdint>

namespace ferry::quant::quant_internal {

// Rounds the 32 floats at x to qs[0..31] = round(x / d) with d = max|x| / 127
// (NaNs ignored in the max), and returns d; *sum gets the sum of qs.
float QuantizeQ8BlockAvx2(const float* x, int8_t* qs, int* sum);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_
