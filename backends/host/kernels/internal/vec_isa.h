// The row primitives of vec.h as one table per instruction set: portable
// (vec_portable.cc), AVX2/FMA/F16C (vec_avx2.cc) and AVX-512 (vec_avx512.cc),
// each compiled in its own library with its own flags. vec.cc picks a table
// at run time. Also the constants the three share, so that their exp and
// sin/cos agree to the ulp where they can.
#ifndef FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_ISA_H_
#define FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_ISA_H_

#include <cstdint>

#include "ferry/graph/dtype.h"

namespace ferry {
namespace cpu_kernels_internal {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// One instruction set's versions of the vec.h functions of the same names
// (convert_row returns false for a pair of dtypes it does not handle).
struct VecKernels {
  void (*binary_row)(BinaryOp op, const float* a, const float* b, float* dst,
                     int64_t n);
  void (*binary_row_scalar)(BinaryOp op, const float* a, float b, float* dst,
                            int64_t n);
  void (*affine_row)(const float* x, float sub, float mul, float* dst,
                     int64_t n);
  void (*silu_row)(const float* x, float* dst, int64_t n);
  void (*gelu_row)(const float* x, float* dst, int64_t n);
  void (*relu_row)(const float* x, float* dst, int64_t n);
  float (*sum_row)(const float* x, int64_t n);
  float (*sum_squares_row)(const float* x, float center, int64_t n);
  float (*dot_row)(const float* x, const float* y, int64_t n);
  void (*axpy_row)(float a, const float* x, float* y, int64_t n);
  void (*dot_rows)(const float* x, const float* rows, int64_t stride,
                   int64_t n_rows, int64_t n, float scale, float* out);
  void (*axpy_rows)(const float* a, const float* rows, int64_t stride,
                    int64_t n_rows, int64_t n, float* y);
  // Null in the AVX-512 table, which uses the AVX2 ones (K/V rows of an
  // f16 cache are short and few per call).
  void (*dot_rows_f16)(const float* x, const Half* rows, int64_t stride,
                       int64_t n_rows, int64_t n, float scale, float* out);
  void (*axpy_rows_f16)(const float* a, const Half* rows, int64_t stride,
                        int64_t n_rows, int64_t n, float* y);
  float (*scale_mask_max_row)(const float* x, const float* mask, float scale,
                              float* dst, int64_t n);
  float (*exp_sub_row)(float* x, float max, int64_t n);
  void (*sin_cos_row)(const float* x, float* sin, float* cos, int64_t n);
  void (*rope_angles_row)(double position, const double* theta, float* angle,
                          int64_t n);
  void (*rope_normal_row)(const float* x, const float* cos2, const float* nsin2,
                          float* dst, int64_t n_dims);
  void (*rope_neox_row)(const float* x, const float* cos, const float* sin,
                        float* dst, int64_t half);
  bool (*convert_row)(DType src_type, const void* src, DType dst_type,
                      void* dst, int64_t n);
};

// The tables. Avx2Kernels() and Avx512Kernels() may only run where the CPU
// has those instructions (vec.cc checks).
const VecKernels& PortableKernels();
const VecKernels& Avx2Kernels();
const VecKernels& Avx512Kernels();
// The AVX-512 table built on SIMDe for CPUs without AVX-512 (tests only:
// :vec_avx512_emulated, avx512_intrinsics.h).
namespace emulated {
const VecKernels& Avx512Kernels();
}  // namespace emulated

// Makes the row primitives use `kernels` until the next ForceIsaForTesting
// (tests only: the emulated table has no Isa of its own).
void ForceKernelsForTesting(const VecKernels& kernels);

// The portable strided conversion (ConvertStrided's fallback).
void ConvertStridedPortable(DType src_type, const void* src, int64_t src_stride,
                            DType dst_type, void* dst, int64_t dst_stride,
                            int64_t n);

// Returns e^x with a relative error of a few ulp (exact 0 below -87.3,
// +inf above 88.7, NaN for NaN): the scalar twin of the vector exps.
float FastExp(float x);

namespace vec_constants {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (Cody-Waite),
// exp(r) from Cephes' degree-5 polynomial.
inline constexpr float kExpLo = -87.3365447505531f;  // exp(kExpLo) = FLT_MIN.
inline constexpr float kExpHi = 88.7228391116729f;   // exp(kExpHi) = FLT_MAX.
// Upper clamp of the activations' exp: round(x log2 e) stays <= 127.
inline constexpr float kExpClampHi = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;
// 2^f for f in [-1/2, 1/2] (silu's exp(-x) as 2^(-x log2 e)): Taylor
// coefficients (ln 2)^k / k!, k = 1..6; relative error < 2e-7.
inline constexpr float kExp2C1 = 6.931471806e-01f;
inline constexpr float kExp2C2 = 2.402265070e-01f;
inline constexpr float kExp2C3 = 5.550410866e-02f;
inline constexpr float kExp2C4 = 9.618129108e-03f;
inline constexpr float kExp2C5 = 1.333355815e-03f;
inline constexpr float kExp2C6 = 1.540353039e-04f;

// sin/cos: x = j * pi/2 + y with |y| <= pi/4 (pi/2 split in three for an
// exact reduction), then Cephes' minimax polynomials on [-pi/4, pi/4].
inline constexpr float kTwoOverPi = 0.63661977236758134308f;
inline constexpr float kHalfPi1 = 1.5703125f;
inline constexpr float kHalfPi2 = 4.837512969970703125e-4f;
inline constexpr float kHalfPi3 = 7.54978995489188216e-8f;
inline constexpr float kSin1 = -1.6666654611e-1f;
inline constexpr float kSin2 = 8.3321608736e-3f;
inline constexpr float kSin3 = -1.9515295891e-4f;
inline constexpr float kCos1 = 4.166664568298827e-2f;
inline constexpr float kCos2 = -1.388731625493765e-3f;
inline constexpr float kCos3 = 2.443315711809948e-5f;

inline constexpr float kSqrt2OverPi = 0.79788456080286535588f;
inline constexpr float kGeluCoef = 0.044715f;

inline constexpr double kTwoPi = 6.283185307179586476925;
inline constexpr double kInvTwoPi = 1.0 / kTwoPi;

}  // namespace vec_constants
}  // namespace cpu_kernels_internal
}  // namespace ferry

#endif  // FERRY_BACKENDS_HOST_KERNELS_INTERNAL_VEC_ISA_H_
