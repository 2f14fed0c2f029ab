#include "ferry/backends/host/kernels/internal/vec.h"

#include <atomic>
#include <optional>

#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {
namespace {

const VecKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return Avx512Kernels();
    case Isa::kAvx2:
      return Avx2Kernels();
    case Isa::kScalar:
      break;
  }
  return PortableKernels();
}

std::optional<Isa> forced_isa;
// The table in use, picked on first use (atomic: kernels on several threads
// may be first at once).
std::atomic<const VecKernels*> active{nullptr};

const VecKernels& K() {
  const VecKernels* kernels = active.load(std::memory_order_relaxed);
  if (kernels == nullptr) {
    kernels = &KernelsFor(ActiveIsa());
    active.store(kernels, std::memory_order_relaxed);
  }
  return *kernels;
}

}  // namespace

void ForceIsaForTesting(std::optional<Isa> isa) {
  forced_isa = isa;
  active.store(&KernelsFor(ActiveIsa()), std::memory_order_relaxed);
}

void ForceKernelsForTesting(const VecKernels& kernels) {
  active.store(&kernels, std::memory_order_relaxed);
}

Isa ActiveIsa() { return forced_isa.value_or(BestIsa()); }

void BinaryRow(BinaryOp op, const float* a, const float* b, float* dst,
               int64_t n) {
  K().binary_row(op, a, b, dst, n);
}

void BinaryRowScalar(BinaryOp op, const float* a, float b, float* dst,
                     int64_t n) {
  K().binary_row_scalar(op, a, b, dst, n);
}

void ScaleRow(const float* x, float s, float* dst, int64_t n) {
  K().binary_row_scalar(BinaryOp::kMul, x, s, dst, n);
}

void AffineRow(const float* x, float sub, float mul, float* dst, int64_t n) {
  K().affine_row(x, sub, mul, dst, n);
}

void SiluRow(const float* x, float* dst, int64_t n) { K().silu_row(x, dst, n); }

void GeluRow(const float* x, float* dst, int64_t n) { K().gelu_row(x, dst, n); }

void ReluRow(const float* x, float* dst, int64_t n) { K().relu_row(x, dst, n); }

float SumRow(const float* x, int64_t n) { return K().sum_row(x, n); }

float SumSquaresRow(const float* x, float center, int64_t n) {
  return K().sum_squares_row(x, center, n);
}

float DotRow(const float* x, const float* y, int64_t n) {
  return K().dot_row(x, y, n);
}

void AxpyRow(float a, const float* x, float* y, int64_t n) {
  K().axpy_row(a, x, y, n);
}

void DotRows(const float* x, const float* rows, int64_t stride, int64_t n_rows,
             int64_t n, float scale, float* out) {
  K().dot_rows(x, rows, stride, n_rows, n, scale, out);
}

void AxpyRows(const float* a, const float* rows, int64_t stride, int64_t n_rows,
              int64_t n, float* y) {
  K().axpy_rows(a, rows, stride, n_rows, n, y);
}

void DotRowsF16(const float* x, const Half* rows, int64_t stride,
                int64_t n_rows, int64_t n, float scale, float* out) {
  auto* const f = K().dot_rows_f16;
  (f != nullptr ? f : Avx2Kernels().dot_rows_f16)(x, rows, stride, n_rows, n,
                                                  scale, out);
}

void AxpyRowsF16(const float* a, const Half* rows, int64_t stride,
                 int64_t n_rows, int64_t n, float* y) {
  auto* const f = K().axpy_rows_f16;
  (f != nullptr ? f : Avx2Kernels().axpy_rows_f16)(a, rows, stride, n_rows, n,
                                                   y);
}

float ScaleMaskMaxRow(const float* x, const float* mask, float scale,
                      float* dst, int64_t n) {
  return K().scale_mask_max_row(x, mask, scale, dst, n);
}

float ExpSubRow(float* x, float max, int64_t n) {
  return K().exp_sub_row(x, max, n);
}

void SinCosRow(const float* x, float* sin, float* cos, int64_t n) {
  K().sin_cos_row(x, sin, cos, n);
}

void RopeAnglesRow(double position, const double* theta, float* angle,
                   int64_t n) {
  K().rope_angles_row(position, theta, angle, n);
}

void RopeNormalRow(const float* x, const float* cos2, const float* nsin2,
                   float* dst, int64_t n_dims) {
  K().rope_normal_row(x, cos2, nsin2, dst, n_dims);
}

void RopeNeoxRow(const float* x, const float* cos, const float* sin, float* dst,
                 int64_t half) {
  K().rope_neox_row(x, cos, sin, dst, half);
}

void ConvertRow(DType src_type, const void* src, DType dst_type, void* dst,
                int64_t n) {
  if (n <= 0) return;
  if (K().convert_row(src_type, src, dst_type, dst, n)) return;
  PortableKernels().convert_row(src_type, src, dst_type, dst, n);
}

void ConvertStrided(DType src_type, const void* src, int64_t src_stride,
                    DType dst_type, void* dst, int64_t dst_stride, int64_t n) {
  if (n <= 0) return;
  if (src_stride == DTypeBlockBytes(src_type) &&
      dst_stride == DTypeBlockBytes(dst_type)) {
    return ConvertRow(src_type, src, dst_type, dst, n);
  }
  ConvertStridedPortable(src_type, src, src_stride, dst_type, dst, dst_stride,
                         n);
}

}  // namespace cpu_kernels_internal
}  // namespace ferry
