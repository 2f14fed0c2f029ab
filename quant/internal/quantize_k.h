// Scalar quantization of f32 rows into the K and iq4 block formats
// (block_formats.h).
//
// q8_K is rounded exactly as ggml's reference rounds it (the activations of
// every K-quant dot product, so that dots match llama.cpp's). The weight
// formats (q2_K..q6_K, iq4_nl, iq4_xs) are ferry's own simple quantizers:
// sub-block scales from each sub-block's range, rounded to the nearest
// quant. They write valid blocks that any ggml reader decodes, but not the
// bytes of ggml's search-based quantizers, which pick scales that lower the
// error further; models come quantized in their files, so these serve tests
// and tools.
#ifndef FERRY_QUANT_INTERNAL_QUANTIZE_K_H_
#define FERRY_QUANT_INTERNAL_QUANTIZE_K_H_

#include <cstdint>

#include "ferry/quant/quant_type.h"

namespace ferry::quant::quant_internal {

// Quantizes `blocks` blocks of `type` from `src` into `dst`. Returns false,
// writing nothing, if !IsKType(type) (dequantize_k.h).
bool QuantizeKBlocks(QuantType type, const float* src, void* dst,
                     int64_t blocks);

}  // namespace ferry::quant::quant_internal

#endif  // FERRY_QUANT_INTERNAL_QUANTIZE_K_H_
