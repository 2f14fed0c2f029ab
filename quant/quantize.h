// Reference (scalar) quantization of f32 rows into ggml block formats, as
// ggml's `quantize_row_*_ref` define them: the same rounding, so that bytes
// match files and the python `gguf` package bit for bit. Exception: the K
// and iq4 weight formats (q2_K..q6_K, iq4_nl, iq4_xs) use ferry's own
// simpler quantizers (internal/quantize_k.h): valid blocks, other bytes
// than ggml's; q8_K matches ggml's.
#ifndef FERRY_QUANT_QUANTIZE_H_
#define FERRY_QUANT_QUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ferry/quant/quant_type.h"

namespace ferry::quant {

// Whether QuantizeRow can produce `type`.
bool CanQuantize(QuantType type);

// Quantizes `n` floats at `src` into RowBytes(type, n) bytes at `dst`.
// Supports f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K, q3_K,
// q4_K, q5_K, q6_K, q8_K, iq4_nl and iq4_xs.
// InvalidArgument if `n` is not a whole number of blocks, Unimplemented for
// other types. Does not take ownership; `dst` must be 2-byte aligned
// (4-byte for q8_K).
absl::Status QuantizeRow(QuantType type, const float* src, void* dst,
                         int64_t n);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_QUANTIZE_H_
