// Scalar vec_dot kernels: the reference every SIMD path is tested against.
#include <cstdint>
#include <cstring>

#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/internal/scales.h"

namespace ferry::quant::quant_internal {
namespace {

float DotQ4_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((x[b].qs[j] & 0x0F) - 8) * y[b].qs[j];
      isum += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(isum) * HalfToFloat(x[b].d) * HalfToFloat(y[b].d);
  }
  return sum;
}

float DotQ4_1Q8_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (x[b].qs[j] & 0x0F) * y[b].qs[j];
      isum += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(isum) * HalfToFloat(x[b].d) * HalfToFloat(y[b].d);
    sum += HalfToFloat(x[b].m) * HalfToFloat(y[b].s);
  }
  return sum;
}

// The 32 five-bit quants of a q5 block, in element order.
template <typename Block>
void Q5Quants(const Block& x, int q[kQK]) {
  uint32_t qh;
  std::memcpy(&qh, x.qh, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (x.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + 16] = (x.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
  }
}

float DotQ5_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    Q5Quants(x[b], q);
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += (q[j] - 16) * y[b].qs[j];
    sum += static_cast<float>(isum) * HalfToFloat(x[b].d) * HalfToFloat(y[b].d);
  }
  return sum;
}

float DotQ5_1Q8_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int q[kQK];
    Q5Quants(x[b], q);
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += q[j] * y[b].qs[j];
    sum += static_cast<float>(isum) * HalfToFloat(x[b].d) * HalfToFloat(y[b].d);
    sum += HalfToFloat(x[b].m) * HalfToFloat(y[b].s);
  }
  return sum;
}

float DotQ8_0Q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += x[b].qs[j] * y[b].qs[j];
    sum += static_cast<float>(isum) * HalfToFloat(x[b].d) * HalfToFloat(y[b].d);
  }
  return sum;
}

float DotF32(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

float DotF16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += F16ToF32(Half{x[i]}) * y[i];
  return sum;
}

float DotBF16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += BF16ToF32(BFloat16{x[i]}) * y[i];
  return sum;
}

}  // namespace

VecDotFn ScalarVecDot(QuantType weight) {
  switch (weight) {
    case QuantType::kQ4_0:
      return DotQ4_0Q8_0;
    case QuantType::kQ4_1:
      return DotQ4_1Q8_1;
    case QuantType::kQ5_0:
      return DotQ5_0Q8_0;
    case QuantType::kQ5_1:
      return DotQ5_1Q8_1;
    case QuantType::kQ8_0:
      return DotQ8_0Q8_0;
    case QuantType::kF32:
      return DotF32;
    case QuantType::kF16:
      return DotF16;
    case QuantType::kBF16:
      return DotBF16;
    default:
      return ScalarVecDotK(weight);
  }
}

}  // namespace ferry::quant::quant_internal
