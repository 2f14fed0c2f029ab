// Dequantization of ggml rows to f32.
#ifndef FERRY_QUANT_DEQUANTIZE_H_
#define FERRY_QUANT_DEQUANTIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry::quant {

// Whether DequantizeRow supports `type`.
bool CanDequantize(QuantType type);

// Expands the RowBytes(type, n) bytes at `src` into `n` floats at `dst`.
// Supports f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K, q3_K,
// q4_K, q5_K, q6_K, q8_K, iq4_nl and iq4_xs.
// InvalidArgument if `n` is not a whole number of blocks, Unimplemented for
// other types. `src` must be 2-byte aligned.
// Uses AVX2 kernels (q4_0, q4_1, q8_0) where the CPU has them, which give
// the same bits as the scalar code.
// `src` must be 4-byte aligned for q8_K (its f32 d).
absl::Status DequantizeRow(QuantType type, const void* src, float* dst,
                           int64_t n);

// As DequantizeRow with the kernels of `isa` or an earlier ISA (kScalar:
// the scalar code only). For tests that compare the paths.
absl::Status DequantizeRowWithIsa(QuantType type, const void* src, float* dst,
                                  int64_t n, Isa isa);

}  // namespace ferry::quant

#endif  // FERRY_QUANT_DEQUANTIZE_H_
