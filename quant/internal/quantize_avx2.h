// AVX2 rounding of activations to 8-bit blocks (q8_0, q8_1), bit-identical
// to the scalar QuantizeQ8Block in quantize.cc: the same scale, the same
// rounding (to nearest, ties to even). Compiled with its own target flags
// (-mavx2 -mf16c): call only where IsaSupported(Isa::kAvx2).
#ifndef FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_
#define FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_

#include <cstdint>

#include "ferry/quant/block_formats.h"

namespace ferry::quant::quant_internal {

// Rounds the 32 floats at x to qs[0..31] = round(x / d) with d = max|x| / 127
// (NaNs ignored in the max), and returns d; *sum gets the sum of qs.
float QuantizeQ8BlockAvx2(const float* x, int8_t* qs, int* sum);

// Whole rows of `blocks` blocks: d (and q8_1's s = d * sum of qs) rounded to
// f16 by the F16C instruction, which rounds as F32ToF16 does. One call per
// row: every quantized mul_mat rounds its activations through here.
void QuantizeQ8_0RowAvx2(const float* x, BlockQ8_0* y, int64_t blocks);
void QuantizeQ8_1RowAvx2(const float* x, BlockQ8_1* y, int64_t blocks);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_QUANTIZE_AVX2_H_
