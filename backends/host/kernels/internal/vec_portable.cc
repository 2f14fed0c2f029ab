// Portable row primitives: plain C++ for any CPU, and the scalar tails of
// the AVX2 versions.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {
namespace {

using namespace vec_constants;  // NOLINT(build/namespaces)

float ApplyScalar(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
  }
  return 0.0f;
}

// e^x for x clamped into [kExpLo, kExpClampHi]: finite and nonzero
// everywhere, which is all x / (1 + e^-x) needs (the quotient saturates
// either way), so the activations skip FastExp's edge cases.
float ExpClamped(float x) {
  // Written so that NaN stays NaN.
  if (x < kExpLo) x = kExpLo;
  if (x > kExpClampHi) x = kExpClampHi;
  return FastExp(x);
}

float SiluScalar(float x) { return x / (1.0f + ExpClamped(-x)); }

float GeluScalar(float x) {
  const float u = kSqrt2OverPi * x * (1.0f + kGeluCoef * x * x);
  return x / (1.0f + ExpClamped(-2.0f * u));
}

void SinCosScalar(float x, float* sin, float* cos) {
  const float j = std::nearbyint(x * kTwoOverPi);
  float y = std::fma(-j, kHalfPi1, x);
  y = std::fma(-j, kHalfPi2, y);
  y = std::fma(-j, kHalfPi3, y);
  const float z = y * y;
  const float sp =
      std::fma(y * z, std::fma(std::fma(kSin3, z, kSin2), z, kSin1), y);
  const float cp =
      std::fma(z * z, std::fma(std::fma(kCos3, z, kCos2), z, kCos1),
               std::fma(-0.5f, z, 1.0f));
  switch (static_cast<int>(j) & 3) {
    case 0:
      *sin = sp;
      *cos = cp;
      return;
    case 1:
      *sin = cp;
      *cos = -sp;
      return;
    case 2:
      *sin = -sp;
      *cos = -cp;
      return;
    default:
      *sin = -cp;
      *cos = sp;
      return;
  }
}

void BinaryRow(BinaryOp op, const float* a, const float* b, float* dst,
               int64_t n) {
  switch (op) {
    case BinaryOp::kAdd:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
      return;
    case BinaryOp::kSub:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] - b[i];
      return;
    case BinaryOp::kMul:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] * b[i];
      return;
    case BinaryOp::kDiv:
      for (int64_t i = 0; i < n; ++i) dst[i] = a[i] / b[i];
      return;
  }
}

void BinaryRowScalar(BinaryOp op, const float* a, float b, float* dst,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ApplyScalar(op, a[i], b);
}

void AffineRow(const float* x, float sub, float mul, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (x[i] - sub) * mul;
}

void SiluRow(const float* x, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = SiluScalar(x[i]);
}

void GeluRow(const float* x, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = GeluScalar(x[i]);
}

void ReluRow(const float* x, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

float SumRow(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  return static_cast<float>(sum);
}

float SumSquaresRow(const float* x, float center, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    sum += d * d;
  }
  return static_cast<float>(sum);
}

float DotRow(const float* x, const float* y, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void AxpyRow(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void DotRows(const float* x, const float* rows, int64_t stride, int64_t n_rows,
             int64_t n, float scale, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    out[r] = scale * DotRow(x, rows + r * stride, n);
  }
}

void AxpyRows(const float* a, const float* rows, int64_t stride, int64_t n_rows,
              int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) AxpyRow(a[r], rows + r * stride, y, n);
}

void DotRowsF16(const float* x, const Half* rows, int64_t stride,
                int64_t n_rows, int64_t n, float scale, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += x[i] * F16ToF32(rows[r * stride + i]);
    out[r] = scale * sum;
  }
}

void AxpyRowsF16(const float* a, const Half* rows, int64_t stride,
                 int64_t n_rows, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n; ++i)
      y[i] += a[r] * F16ToF32(rows[r * stride + i]);
  }
}

float ScaleMaskMaxRow(const float* x, const float* mask, float scale,
                      float* dst, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const float v =
        mask != nullptr ? std::fma(x[i], scale, mask[i]) : x[i] * scale;
    dst[i] = v;
    max = std::max(max, v);
  }
  return max;
}

float ExpSubRow(float* x, float max, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = FastExp(x[i] - max);
    sum += x[i];
  }
  return static_cast<float>(sum);
}

void SinCosRow(const float* x, float* sin, float* cos, int64_t n) {
  for (int64_t i = 0; i < n; ++i) SinCosScalar(x[i], sin + i, cos + i);
}

void RopeAnglesRow(double position, const double* theta, float* angle,
                   int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    const double a = position * theta[k];
    angle[k] = static_cast<float>(a - kTwoPi * std::nearbyint(a * kInvTwoPi));
  }
}

void RopeNormalRow(const float* x, const float* cos2, const float* nsin2,
                   float* dst, int64_t n_dims) {
  for (int64_t i = 0; i < n_dims; i += 2) {
    const float x0 = x[i];
    const float x1 = x[i + 1];
    dst[i] = x0 * cos2[i] + x1 * nsin2[i];
    dst[i + 1] = x1 * cos2[i + 1] + x0 * nsin2[i + 1];
  }
}

void RopeNeoxRow(const float* x, const float* cos, const float* sin, float* dst,
                 int64_t half) {
  for (int64_t k = 0; k < half; ++k) {
    const float x0 = x[k];
    const float x1 = x[k + half];
    dst[k] = x0 * cos[k] - x1 * sin[k];
    dst[k + half] = x0 * sin[k] + x1 * cos[k];
  }
}

template <typename Src, typename Dst>
void ConvertLoop(const std::byte* src, int64_t src_stride, std::byte* dst,
                 int64_t dst_stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Src s;
    std::memcpy(&s, src + i * src_stride, sizeof(s));
    float f;
    if constexpr (std::is_same_v<Src, float>) {
      f = s;
    } else if constexpr (std::is_same_v<Src, Half>) {
      f = F16ToF32(s);
    } else {
      f = BF16ToF32(s);
    }
    Dst d;
    if constexpr (std::is_same_v<Dst, float>) {
      d = f;
    } else if constexpr (std::is_same_v<Dst, Half>) {
      d = F32ToF16(f);
    } else {
      d = F32ToBF16(f);
    }
    std::memcpy(dst + i * dst_stride, &d, sizeof(d));
  }
}

template <typename Src>
void ConvertFrom(DType dst_type, const std::byte* src, int64_t src_stride,
                 std::byte* dst, int64_t dst_stride, int64_t n) {
  switch (dst_type) {
    case DType::kF32:
      return ConvertLoop<Src, float>(src, src_stride, dst, dst_stride, n);
    case DType::kF16:
      return ConvertLoop<Src, Half>(src, src_stride, dst, dst_stride, n);
    case DType::kBF16:
      return ConvertLoop<Src, BFloat16>(src, src_stride, dst, dst_stride, n);
    default:
      return;  // Rejected by callers (CheckSupported).
  }
}

bool ConvertRow(DType src_type, const void* src, DType dst_type, void* dst,
                int64_t n) {
  ConvertStridedPortable(src_type, src, DTypeBlockBytes(src_type), dst_type,
                         dst, DTypeBlockBytes(dst_type), n);
  return true;
}

}  // namespace

float FastExp(float x) {
  if (std::isnan(x)) return x;
  if (x < kExpLo) return 0.0f;
  if (x > kExpHi) return std::numeric_limits<float>::infinity();
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kExpP0;
  p = std::fma(p, r, kExpP1);
  p = std::fma(p, r, kExpP2);
  p = std::fma(p, r, kExpP3);
  p = std::fma(p, r, kExpP4);
  p = std::fma(p, r, kExpP5);
  p = std::fma(p, r * r, r + 1.0f);
  const int s = n > 0 ? 1 : 0;
  const int e = static_cast<int>(n) - s;
  p *= std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return s ? p * 2.0f : p;
}

void ConvertStridedPortable(DType src_type, const void* src_v,
                            int64_t src_stride, DType dst_type, void* dst_v,
                            int64_t dst_stride, int64_t n) {
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  if (src_type == dst_type) {
    const int64_t size = DTypeBlockBytes(src_type);
    if (src_stride == size && dst_stride == size) {
      std::memcpy(dst, src, static_cast<size_t>(n * size));
      return;
    }
    if (size == 4) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * dst_stride, src + i * src_stride, 4);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + i * dst_stride, src + i * src_stride,
                    static_cast<size_t>(size));
      }
    }
    return;
  }
  switch (src_type) {
    case DType::kF32:
      return ConvertFrom<float>(dst_type, src, src_stride, dst, dst_stride, n);
    case DType::kF16:
      return ConvertFrom<Half>(dst_type, src, src_stride, dst, dst_stride, n);
    case DType::kBF16:
      return ConvertFrom<BFloat16>(dst_type, src, src_stride, dst, dst_stride,
                                   n);
    default:
      return;  // Rejected by callers (CheckSupported).
  }
}

const VecKernels& PortableKernels() {
  static constexpr VecKernels kKernels = {
      .binary_row = BinaryRow,
      .binary_row_scalar = BinaryRowScalar,
      .affine_row = AffineRow,
      .silu_row = SiluRow,
      .gelu_row = GeluRow,
      .relu_row = ReluRow,
      .sum_row = SumRow,
      .sum_squares_row = SumSquaresRow,
      .dot_row = DotRow,
      .axpy_row = AxpyRow,
      .dot_rows = DotRows,
      .axpy_rows = AxpyRows,
      .dot_rows_f16 = DotRowsF16,
      .axpy_rows_f16 = AxpyRowsF16,
      .scale_mask_max_row = ScaleMaskMaxRow,
      .exp_sub_row = ExpSubRow,
      .sin_cos_row = SinCosRow,
      .rope_angles_row = RopeAnglesRow,
      .rope_normal_row = RopeNormalRow,
      .rope_neox_row = RopeNeoxRow,
      .convert_row = ConvertRow,
  };
  return kKernels;
}

}  // namespace cpu_kernels_internal
}  // namespace ferry
