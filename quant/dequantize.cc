#include "ferry/quant/dequantize.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/dequantize_avx2.h"
#include "ferry/quant/internal/dequantize_k.h"
#include "ferry/quant/internal/scales.h"

namespace ferry::quant {
namespace {

using quant_internal::HalfToFloat;

void DequantizeQ4_0(const BlockQ4_0* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((x[b].qs[j] & 0x0F) - 8);
      y[j + 16] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
    }
  }
}

void DequantizeQ4_1(const BlockQ4_1* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const float d = HalfToFloat(x[b].d);
    const float m = HalfToFloat(x[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(x[b].qs[j] & 0x0F) + m;
      y[j + 16] = d * static_cast<float>(x[b].qs[j] >> 4) + m;
    }
  }
}

inline uint32_t FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

void DequantizeQ5_0(const BlockQ5_0* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const float d = HalfToFloat(x[b].d);
    const uint32_t qh = FifthBits(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo =
          (x[b].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi =
          (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = d * static_cast<float>(lo - 16);
      y[j + 16] = d * static_cast<float>(hi - 16);
    }
  }
}

void DequantizeQ5_1(const BlockQ5_1* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const float d = HalfToFloat(x[b].d);
    const float m = HalfToFloat(x[b].m);
    const uint32_t qh = FifthBits(x[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo =
          (x[b].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi =
          (x[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = d * static_cast<float>(lo) + m;
      y[j + 16] = d * static_cast<float>(hi) + m;
    }
  }
}

template <typename Block>
void DequantizeQ8(const Block* x, float* y, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, y += kQK) {
    const float d = HalfToFloat(x[b].d);
    for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(x[b].qs[j]);
  }
}

}  // namespace

bool CanDequantize(QuantType type) {
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
      return true;
    default:
      return quant_internal::IsKType(type);
  }
}

absl::Status DequantizeRow(QuantType type, const void* src, float* dst,
                           int64_t n) {
  return DequantizeRowWithIsa(type, src, dst, n, BestIsa());
}

absl::Status DequantizeRowWithIsa(QuantType type, const void* src, float* dst,
                                  int64_t n, Isa isa) {
  if (!CanDequantize(type)) {
    return absl::UnimplementedError(
        absl::StrCat("no dequantizer for ", QuantTypeName(type)));
  }
  if (n < 0 || n % BlockSize(type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row of ", n, " elements is not a whole number of ",
                     QuantTypeName(type), " blocks"));
  }
  const int64_t blocks = n / BlockSize(type);
  if (isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2) &&
      quant_internal::DequantizeBlocksAvx2(type, src, dst, blocks)) {
    return absl::OkStatus();
  }
  switch (type) {
    case QuantType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case QuantType::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(Half{in[i]});
      break;
    }
    case QuantType::kBF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(BFloat16{in[i]});
      break;
    }
    case QuantType::kQ4_0:
      DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, blocks);
      break;
    case QuantType::kQ4_1:
      DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), dst, blocks);
      break;
    case QuantType::kQ5_0:
      DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), dst, blocks);
      break;
    case QuantType::kQ5_1:
      DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), dst, blocks);
      break;
    case QuantType::kQ8_0:
      DequantizeQ8(static_cast<const BlockQ8_0*>(src), dst, blocks);
      break;
    case QuantType::kQ8_1:
      DequantizeQ8(static_cast<const BlockQ8_1*>(src), dst, blocks);
      break;
    default:
      quant_internal::DequantizeKBlocks(type, src, dst, blocks);
      break;
  }
  return absl::OkStatus();
}

}  // namespace ferry::quant
