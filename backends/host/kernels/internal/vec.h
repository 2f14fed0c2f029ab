// Row primitives of the CPU op kernels: element-wise math, reductions and
// dtype conversion over contiguous float rows, each in an AVX-512, an
// AVX2/FMA/F16C and a portable version (vec_isa.h), the best the CPU runs
// picked at run time.
//
// All functions work on `n` contiguous elements. Unless stated, `dst` may
// equal a source (same address; the op then runs in place) but must not
// otherwise overlap one.
#ifndef FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_H_
#define FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_H_

#include <cstdint>
#include <optional>

#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"
#include "ferry/runtime/cpu_features.h"

namespace ferry {
namespace cpu_kernels_internal {

// Every Isa (runtime/cpu_features.h) has versions; kScalar's are the
// portable ones. Makes the row primitives use `isa` (which must be supported)
// instead of BestIsa(), or BestIsa() again for nullopt. For tests that force
// each path. Not thread-safe: call it only while no kernel runs.
void ForceIsaForTesting(std::optional<Isa> isa);
// Returns the Isa the row primitives use.
Isa ActiveIsa();

// dst[i] = a[i] op b[i].
void BinaryRow(BinaryOp op, const float* a, const float* b, float* dst,
               int64_t n);
// dst[i] = a[i] op b.
void BinaryRowScalar(BinaryOp op, const float* a, float b, float* dst,
                     int64_t n);

// dst[i] = x[i] * s.
void ScaleRow(const float* x, float s, float* dst, int64_t n);
// dst[i] = (x[i] - sub) * mul.
void AffineRow(const float* x, float sub, float mul, float* dst, int64_t n);

// Activations (gelu: tanh approximation, computed as x * sigmoid(2u)).
void SiluRow(const float* x, float* dst, int64_t n);
void GeluRow(const float* x, float* dst, int64_t n);
void ReluRow(const float* x, float* dst, int64_t n);

// Returns sum(x[i]).
float SumRow(const float* x, int64_t n);
// Returns sum((x[i] - center)^2).
float SumSquaresRow(const float* x, float center, int64_t n);
// Returns sum(x[i] * y[i]).
float DotRow(const float* x, const float* y, int64_t n);
// y[i] += a * x[i].
void AxpyRow(float a, const float* x, float* y, int64_t n);
// out[r] = scale * DotRow(x, rows + r * stride, n) for r < n_rows (stride
// in floats): one call for a query against many key rows.
void DotRows(const float* x, const float* rows, int64_t stride, int64_t n_rows,
             int64_t n, float scale, float* out);
// y[i] += sum over r < n_rows of a[r] * rows[r * stride + i]: y stays in
// registers while the rows stream past.
void AxpyRows(const float* a, const float* rows, int64_t stride, int64_t n_rows,
              int64_t n, float* y);
// DotRows and AxpyRows over f16 rows (an f16 KV cache), each element
// widened to f32 as it is read.
void DotRowsF16(const float* x, const Half* rows, int64_t stride,
                int64_t n_rows, int64_t n, float scale, float* out);
void AxpyRowsF16(const float* a, const Half* rows, int64_t stride,
                 int64_t n_rows, int64_t n, float* y);

// dst[i] = x[i] * scale + (mask ? mask[i] : 0); returns max(dst[i]) (-inf
// for n == 0). dst may equal x.
float ScaleMaskMaxRow(const float* x, const float* mask, float scale,
                      float* dst, int64_t n);
// x[i] = exp(x[i] - max); returns the sum of the new x[i].
float ExpSubRow(float* x, float max, int64_t n);

// sin[i] = sin(x[i]), cos[i] = cos(x[i]) within a few float ulp for
// |x[i]| <= 4 pi (callers reduce larger angles first, in double).
void SinCosRow(const float* x, float* sin, float* cos, int64_t n);

// angle[k] = position * theta[k] reduced into [-pi, pi], computed in double
// (so large positions keep their accuracy) and rounded to float: rope's
// angles of one token.
void RopeAnglesRow(double position, const double* theta, float* angle,
                   int64_t n);

// Rotates the n_dims / 2 adjacent pairs of x (rope's normal mode):
//   dst[2k]     = x[2k] * cos2[2k]         + x[2k+1] * nsin2[2k]
//   dst[2k + 1] = x[2k+1] * cos2[2k+1]     + x[2k] * nsin2[2k+1]
// with cos2 = [c0, c0, c1, c1, ...] and nsin2 = [-s0, s0, -s1, s1, ...].
void RopeNormalRow(const float* x, const float* cos2, const float* nsin2,
                   float* dst, int64_t n_dims);
// Rotates the pairs (x[k], x[k + half]) (rope's neox mode):
//   dst[k] = x[k] c[k] - x[k+half] s[k], dst[k+half] = x[k] s[k] + x[k+half]
//   c[k].
void RopeNeoxRow(const float* x, const float* cos, const float* sin, float* dst,
                 int64_t half);

// Converts n contiguous elements between dtypes: float types (f32, f16,
// bf16) into each other, or a dtype into itself (i32 included). f32 -> f16
// and f32 -> bf16 round to nearest even exactly like F32ToF16/F32ToBF16.
// dst must not overlap src.
void ConvertRow(DType src_type, const void* src, DType dst_type, void* dst,
                int64_t n);

// As ConvertRow with byte strides between elements (any sign but 0 allowed
// only for n <= 1).
void ConvertStrided(DType src_type, const void* src, int64_t src_stride,
                    DType dst_type, void* dst, int64_t dst_stride, int64_t n);

}  // namespace cpu_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_H_
