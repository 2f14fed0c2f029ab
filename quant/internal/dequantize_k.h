// Scalar dequantization of the K and iq4 block formats (block_formats.h).
#ifndef FERRY_QUANT_INTERNAL_DEQUANTIZE_K_H_
#define FERRY_QUANT_INTERNAL_DEQUANTIZE_K_H_

#include <cstdint>

#include "ferry/quant/quant_type.h"

namespace ferry::quant::quant_internal {

// Whether DequantizeKBlocks takes `type`: q2_K..q6_K, q8_K, iq4_nl, iq4_xs.
bool IsKType(QuantType type);

// Expands `blocks` blocks of `type` at `src` into floats at `dst`, with the
// float operations in the order of the python gguf package (the scale
// products first), so results match it bit for bit. Returns false, writing
// nothing, if !IsKType(type).
bool DequantizeKBlocks(QuantType type, const void* src, float* dst,
                       int64_t blocks);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_DEQUANTIZE_K_H_
