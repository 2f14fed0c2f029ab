// Each instruction set's row primitives against the portable ones, over
// every length 0..70 (so that each vector tail, masked or scalar, is hit),
// and checks that nothing is written past a row's end.
#include "ferry/backends/host/kernels/internal/vec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/internal/vec_isa.h"
#include "ferry/graph/dtype.h"
#include "gtest/gtest.h"

namespace ferry::cpu_kernels_internal {
namespace {

constexpr int64_t kMaxLength = 70;
// Guard elements after each destination row; they must stay untouched.
constexpr int64_t kGuard = 17;
constexpr float kGuardValue = -12345.0f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// |got - want| <= tol * (1 + |want|), NaN only where want is NaN (a plain
// comparison would pass on NaN).
::testing::AssertionResult Close(float want, float got, float tol) {
  if (std::isnan(want) || std::isnan(got)) {
    if (std::isnan(want) && std::isnan(got)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "want " << want << ", got " << got;
  }
  if (std::isinf(want) || std::isinf(got)) {
    if (want == got) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "want " << want << ", got " << got;
  }
  if (std::fabs(got - want) <= tol * (1.0f + std::fabs(want))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "want " << want << ", got " << got;
}

std::vector<float> RandomRow(std::mt19937& rng, int64_t n, float lo, float hi,
                             bool with_nan) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> row(static_cast<size_t>(n + kGuard), kGuardValue);
  for (int64_t i = 0; i < n; ++i) row[i] = dist(rng);
  if (with_nan && n > 2) row[static_cast<size_t>(n / 2)] = kNaN;
  return row;
}

std::vector<float> GuardedRow(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n + kGuard), kGuardValue);
}

// A vector path: an ISA's kernels, or the AVX-512 ones emulated on SIMDe
// (avx512_intrinsics.h), which run wherever AVX2 does.
struct Path {
  Isa isa;
  bool emulated;
};

class VecIsaTest : public ::testing::TestWithParam<Path> {
 protected:
  void TearDown() override { ForceIsaForTesting(std::nullopt); }

  // Runs fn(dst) on the portable path and on GetParam()'s into rows of
  // length n + kGuard, and compares the first n elements (the guard must
  // keep kGuardValue).
  template <typename Fn>
  void Compare(const std::string& what, int64_t n, float tol, Fn fn) {
    std::vector<float> want = GuardedRow(n);
    std::vector<float> got = GuardedRow(n);
    ForceIsaForTesting(Isa::kScalar);
    fn(want.data());
    if (GetParam().emulated) {
#ifdef FERRY_TEST_AVX512_EMULATION
      ForceKernelsForTesting(emulated::Avx512Kernels());
#endif
    } else {
      ForceIsaForTesting(GetParam().isa);
    }
    fn(got.data());
    for (int64_t i = 0; i < n + kGuard; ++i) {
      const float expected = i < n ? want[i] : kGuardValue;
      EXPECT_TRUE(Close(expected, got[i], tol))
          << what << " n=" << n << " i=" << i;
    }
  }
};

TEST_P(VecIsaTest, ElementWiseMatchPortable) {
  std::mt19937 rng(1);
  for (int64_t n = 0; n <= kMaxLength; ++n) {
    const std::vector<float> a = RandomRow(rng, n, -8, 8, /*with_nan=*/true);
    std::vector<float> b = RandomRow(rng, n, 0.5f, 4, /*with_nan=*/false);
    for (BinaryOp op :
         {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      const std::string name = absl::StrCat("binary ", static_cast<int>(op));
      Compare(name, n, 0,
              [&](float* d) { BinaryRow(op, a.data(), b.data(), d, n); });
      Compare(name + " scalar", n, 0,
              [&](float* d) { BinaryRowScalar(op, a.data(), 1.75f, d, n); });
    }
    Compare("scale", n, 0, [&](float* d) { ScaleRow(a.data(), -0.3f, d, n); });
    Compare("affine", n, 0,
            [&](float* d) { AffineRow(a.data(), 0.25f, 3.0f, d, n); });
    Compare("silu", n, 2e-6f, [&](float* d) { SiluRow(a.data(), d, n); });
    Compare("gelu", n, 2e-6f, [&](float* d) { GeluRow(a.data(), d, n); });
    Compare("relu", n, 0, [&](float* d) { ReluRow(a.data(), d, n); });
    // In place.
    Compare("silu in place", n, 2e-6f, [&](float* d) {
      std::copy(a.begin(), a.begin() + n, d);
      SiluRow(d, d, n);
    });
  }
}

// The activations at the ends of exp's range, where the vector paths clamp
// or scale differently from the portable one: zeros, tiny, large, past
// exp's overflow, infinities and NaN.
TEST_P(VecIsaTest, ActivationsAtExtremesMatchPortable) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a;
  for (float x : {0.0f, 1e-30f, 0.5f, 5.0f, 20.0f, 43.0f, 50.0f, 86.0f, 87.5f,
                  88.0f, 88.8f, 89.0f, 100.0f, 1e30f, inf}) {
    a.push_back(x);
    a.push_back(-x);
  }
  a.push_back(kNaN);
  const auto n = static_cast<int64_t>(a.size());
  a.resize(a.size() + kGuard, kGuardValue);
  Compare("silu", n, 2e-6f, [&](float* d) { SiluRow(a.data(), d, n); });
  Compare("gelu", n, 2e-6f, [&](float* d) { GeluRow(a.data(), d, n); });
}

TEST_P(VecIsaTest, ReductionsMatchPortable) {
  std::mt19937 rng(2);
  for (int64_t n = 0; n <= kMaxLength; ++n) {
    const std::vector<float> x = RandomRow(rng, n, -4, 4, /*with_nan=*/false);
    Compare("sum", 1, 1e-4f, [&](float* d) { d[0] = SumRow(x.data(), n); });
    Compare("sum squares", 1, 1e-5f,
            [&](float* d) { d[0] = SumSquaresRow(x.data(), 0.5f, n); });
    const std::vector<float> y = RandomRow(rng, n, -4, 4, /*with_nan=*/false);
    Compare("dot", 1, 1e-4f,
            [&](float* d) { d[0] = DotRow(x.data(), y.data(), n); });
    Compare("axpy", n, 1e-6f, [&](float* d) {
      std::copy(y.begin(), y.begin() + n, d);
      AxpyRow(-1.5f, x.data(), d, n);
    });
    // 1 to 6, 8, 9 and 17 rows of n at a stride of n + 3 (the tails of
    // 8-row groups and of n included).
    const int64_t stride = n + 3;
    const std::vector<float> rows =
        RandomRow(rng, 17 * stride, -4, 4, /*with_nan=*/false);
    const std::vector<float> weights = RandomRow(rng, 17, -1, 1, false);
    std::vector<Half> halves;
    std::vector<float> widened;  // The f32 rows the f16 ones stand for.
    for (float v : rows) {
      halves.push_back(F32ToF16(v));
      widened.push_back(F16ToF32(halves.back()));
    }
    for (int64_t n_rows : {1, 2, 3, 4, 5, 6, 8, 9, 17}) {
      Compare("dot rows", n_rows, 1e-4f, [&](float* d) {
        DotRows(x.data(), rows.data(), stride, n_rows, n, 0.5f, d);
      });
      Compare("axpy rows", n, 1e-5f, [&](float* d) {
        std::copy(y.begin(), y.begin() + n, d);
        AxpyRows(weights.data(), rows.data(), stride, n_rows, n, d);
      });
      Compare("dot f16 rows", n_rows, 1e-4f, [&](float* d) {
        DotRowsF16(x.data(), halves.data(), stride, n_rows, n, 0.5f, d);
      });
      Compare("axpy f16 rows", n, 1e-5f, [&](float* d) {
        std::copy(y.begin(), y.begin() + n, d);
        AxpyRowsF16(weights.data(), halves.data(), stride, n_rows, n, d);
      });
      // And each equals its f32 primitive on the widened rows.
      std::vector<float> f16(static_cast<size_t>(n_rows));
      std::vector<float> f32(static_cast<size_t>(n_rows));
      DotRowsF16(x.data(), halves.data(), stride, n_rows, n, 0.5f, f16.data());
      DotRows(x.data(), widened.data(), stride, n_rows, n, 0.5f, f32.data());
      for (int64_t r = 0; r < n_rows; ++r) {
        EXPECT_TRUE(Close(f32[r], f16[r], 1e-4f)) << "dot f16 rows r=" << r;
      }
      std::vector<float> y16(y.begin(), y.begin() + n);
      std::vector<float> y32(y.begin(), y.begin() + n);
      AxpyRowsF16(weights.data(), halves.data(), stride, n_rows, n, y16.data());
      AxpyRows(weights.data(), widened.data(), stride, n_rows, n, y32.data());
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_TRUE(Close(y32[i], y16[i], 1e-5f)) << "axpy f16 rows i=" << i;
      }
    }
    std::vector<float> mask = RandomRow(rng, n, -2, 0, /*with_nan=*/false);
    if (n > 3) mask[1] = -std::numeric_limits<float>::infinity();
    Compare("scale mask max", n, 0, [&](float* d) {
      ScaleMaskMaxRow(x.data(), mask.data(), 0.7f, d, n);
    });
    Compare("scale max", n, 0,
            [&](float* d) { ScaleMaskMaxRow(x.data(), nullptr, 0.7f, d, n); });
    Compare("max", 2, 0, [&](float* d) {
      std::vector<float> scratch = GuardedRow(n);
      d[0] = ScaleMaskMaxRow(x.data(), mask.data(), 0.7f, scratch.data(), n);
      d[1] = ScaleMaskMaxRow(x.data(), nullptr, 0.7f, scratch.data(), n);
    });
    float sum[2];
    int call = 0;
    Compare("exp sub", n, 2e-6f, [&](float* d) {
      std::copy(x.begin(), x.begin() + n, d);
      sum[call++] = ExpSubRow(d, 1.5f, n);
    });
    EXPECT_TRUE(Close(sum[0], sum[1], 1e-5f)) << "exp sub's sum n=" << n;
  }
}

TEST_P(VecIsaTest, RopeMatchesPortable) {
  std::mt19937 rng(3);
  for (int64_t n = 0; n <= kMaxLength; ++n) {
    const std::vector<float> angle =
        RandomRow(rng, n, -12.5f, 12.5f, /*with_nan=*/false);
    std::vector<float> other = GuardedRow(n);
    Compare("sin", n, 1e-6f,
            [&](float* d) { SinCosRow(angle.data(), d, other.data(), n); });
    Compare("cos", n, 1e-6f,
            [&](float* d) { SinCosRow(angle.data(), other.data(), d, n); });
    std::vector<double> theta(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) theta[k] = std::pow(10000.0, -k / 35.0);
    for (double position : {0.0, 7.0, 123456.0}) {
      Compare(absl::StrCat("angles at ", position), n, 1e-6f,
              [&](float* d) { RopeAnglesRow(position, theta.data(), d, n); });
    }
    const int64_t n_dims = n / 2 * 2;
    const std::vector<float> x = RandomRow(rng, n, -3, 3, /*with_nan=*/false);
    const std::vector<float> c = RandomRow(rng, n, -1, 1, /*with_nan=*/false);
    const std::vector<float> s = RandomRow(rng, n, -1, 1, /*with_nan=*/false);
    Compare("rope normal", n_dims, 1e-6f, [&](float* d) {
      RopeNormalRow(x.data(), c.data(), s.data(), d, n_dims);
    });
    Compare("rope neox", n_dims, 1e-6f, [&](float* d) {
      RopeNeoxRow(x.data(), c.data(), s.data(), d, n_dims / 2);
    });
  }
}

TEST_P(VecIsaTest, ConversionsMatchPortable) {
  std::mt19937 rng(4);
  for (int64_t n = 0; n <= kMaxLength; ++n) {
    std::vector<float> x = RandomRow(rng, n, -70000, 70000, /*with_nan=*/true);
    if (n > 5) x[3] = 1e-6f;  // A half subnormal.
    for (DType half : {DType::kF16, DType::kBF16}) {
      // Narrowed, then widened back: both directions must agree bit for
      // bit with the portable rounding (compared as widened floats).
      std::vector<uint16_t> narrow[2];
      int call = 0;
      Compare(absl::StrCat("f32 -> ", DTypeName(half), " -> f32"), n, 0,
              [&](float* d) {
                std::vector<uint16_t>& bits = narrow[call++];
                bits.assign(static_cast<size_t>(n + kGuard), 0xbeef);
                ConvertRow(DType::kF32, x.data(), half, bits.data(), n);
                ConvertRow(half, bits.data(), DType::kF32, d, n);
              });
      for (int64_t i = 0; i < n + kGuard; ++i) {
        if (i < n && std::isnan(x[i])) continue;  // NaN payloads may differ.
        EXPECT_EQ(narrow[0][i], narrow[1][i])
            << DTypeName(half) << " n=" << n << " i=" << i;
      }
    }
  }
}

std::vector<Path> SupportedVectorPaths() {
  std::vector<Path> paths;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) paths.push_back({isa, false});
  }
  // The emulated build is compiled for AVX2 (and left out of TSan's build).
#ifdef FERRY_TEST_AVX512_EMULATION
  if (IsaSupported(Isa::kAvx2)) paths.push_back({Isa::kAvx512, true});
#endif
  return paths;
}

INSTANTIATE_TEST_SUITE_P(EverySupportedIsa, VecIsaTest,
                         ::testing::ValuesIn(SupportedVectorPaths()),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return std::string(IsaName(info.param.isa)) +
                                  (info.param.emulated ? "Emulated" : "");
                         });
// A CPU with neither has no vector path to compare.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VecIsaTest);

TEST(VecIsaSelectionTest, ForcingPicksThePathAndNulloptRestoresTheBest) {
  ForceIsaForTesting(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  ForceIsaForTesting(std::nullopt);
  EXPECT_EQ(ActiveIsa(), BestIsa());
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  // This machine kind has AVX2 at least (BUILD_ENV.md); say which ran.
  std::cout << "best row ISA: " << IsaName(BestIsa()) << "\n";
}

}  // namespace
}  // namespace ferry::cpu_kernels_internal
