#include "ferry/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/quantize_avx2.h"
#include "ferry/quant/internal/quantize_k.h"
#include "ferry/quant/internal/scales.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry::quant {
namespace {

using quant_internal::FloatToHalf;
using quant_internal::HalfToFloat;

void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    // The value of largest magnitude, with its sign, maps to -8.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToHalf(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToHalf(d);
    y[b].m = FloatToHalf(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
      const int hi =
          std::min(15, static_cast<int>((x[j + 16] - min) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToHalf(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int hi = std::min(31, static_cast<int>(x[j + 16] * id + 16.5f));
      y[b].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToHalf(d);
    y[b].m = FloatToHalf(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min(31, static_cast<int>((x[j] - min) * id + 0.5f));
      const int hi =
          std::min(31, static_cast<int>((x[j + 16] - min) * id + 0.5f));
      y[b].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

// Shared by q8_0 and q8_1: returns d and writes the 32 quants. As ggml's
// x86 CPU code rounds activations (not its scalar reference, which takes
// 1 / d and roundf): x * (127 / max|x|) to the nearest integer, ties to
// even, so that ferry's products round where llama.cpp's do.
float QuantizeQ8BlockScalar(const float* x, int8_t* qs) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0 ? 127 / amax : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    // The default rounding mode: to nearest, ties to even.
    qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
  return amax / 127;
}

// Rows of q8_0 / q8_1 blocks: on AVX2 whole rows at a time (the
// activations of every quantized mul_mat go through here), else block by
// block.
void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t blocks) {
  if (IsaSupported(Isa::kAvx2)) {
    return quant_internal::QuantizeQ8_0RowAvx2(x, y, blocks);
  }
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    y[b].d = FloatToHalf(QuantizeQ8BlockScalar(x, y[b].qs));
  }
}

void QuantizeQ8_1(const float* x, BlockQ8_1* y, int64_t blocks) {
  if (IsaSupported(Isa::kAvx2)) {
    return quant_internal::QuantizeQ8_1RowAvx2(x, y, blocks);
  }
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    const float d = QuantizeQ8BlockScalar(x, y[b].qs);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) sum += y[b].qs[j];
    y[b].d = FloatToHalf(d);
    y[b].s = FloatToHalf(static_cast<float>(sum) * d);
  }
}

}  // namespace

bool CanQuantize(QuantType type) {
  switch (type) {
    case QuantType::kF32:
    case QuantType::kF16:
    case QuantType::kBF16:
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1:
    case QuantType::kQ8_0:
    case QuantType::kQ8_1:
    case QuantType::kQ2_K:
    case QuantType::kQ3_K:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K:
    case QuantType::kQ8_K:
    case QuantType::kIQ4_NL:
    case QuantType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

absl::Status QuantizeRow(QuantType type, const float* src, void* dst,
                         int64_t n) {
  if (!CanQuantize(type)) {
    return absl::UnimplementedError(
        absl::StrCat("no quantizer for ", QuantTypeName(type)));
  }
  if (n < 0 || n % BlockSize(type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " elements is not a whole number of ",
                     QuantTypeName(type), " blocks"));
  }
  const int64_t blocks = n / BlockSize(type);
  switch (type) {
    case QuantType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case QuantType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(src[i]).bits;
      break;
    }
    case QuantType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = F32ToBF16(src[i]).bits;
      break;
    }
    case QuantType::kQ4_0:
      QuantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), blocks);
      break;
    case QuantType::kQ4_1:
      QuantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), blocks);
      break;
    case QuantType::kQ5_0:
      QuantizeQ5_0(src, static_cast<BlockQ5_0*>(dst), blocks);
      break;
    case QuantType::kQ5_1:
      QuantizeQ5_1(src, static_cast<BlockQ5_1*>(dst), blocks);
      break;
    case QuantType::kQ8_0:
      QuantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), blocks);
      break;
    case QuantType::kQ8_1:
      QuantizeQ8_1(src, static_cast<BlockQ8_1*>(dst), blocks);
      break;
    default:
      quant_internal::QuantizeKBlocks(type, src, dst, blocks);
      break;
  }
  return absl::OkStatus();
}

}  // namespace ferry::quant
