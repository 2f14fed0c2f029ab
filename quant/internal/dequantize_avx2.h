// AVX2 + F16C dequantization of the block types the models in use store
// (q4_0, q4_1, q8_0); bit-identical to the scalar code (a multiply, then an
// add, never fused). Compiled with its own target flags: call only where
// IsaSupported(Isa::kAvx2).
#ifndef FERRY_QUANT_INTERNAL_DEQUANTIZE_AVX2_H_
#define FERRY_QUANT_INTERNAL_DEQUANTIZE_AVX2_H_

#include <cstdint>

#include "ferry/quant/quant_type.h"

namespace ferry::quant::quant_internal {

// Expands `blocks` blocks of `type` at `src` into floats at `dst`; returns
// false (writing nothing) for a type without an AVX2 kernel.
bool DequantizeBlocksAvx2(QuantType type, const void* src, float* dst,
                          int64_t blocks);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_DEQUANTIZE_AVX2_H_
