// Every vec_dot path against the scalar one and against the float dot of
// the dequantized rows, on lengths with odd block counts.
#include "ferry/backends/host/vec_dot.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/internal/vec_dot_kernels.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_type.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/cpu_features.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::quant {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

constexpr QuantType kWeightTypes[] = {
    QuantType::kQ4_0, QuantType::kQ4_1,   QuantType::kQ5_0,  QuantType::kQ5_1,
    QuantType::kQ8_0, QuantType::kF32,    QuantType::kF16,   QuantType::kBF16,
    QuantType::kQ2_K, QuantType::kQ3_K,   QuantType::kQ4_K,  QuantType::kQ5_K,
    QuantType::kQ6_K, QuantType::kIQ4_NL, QuantType::kIQ4_XS};
constexpr Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

// The kernel builds this CPU runs: each ISA it has, and the AVX-512 kernels
// emulated on SIMDe (avx512_intrinsics.h) where it has AVX2, which that
// build is compiled for.
struct Build {
  std::string name;
  VecDotFn (*find)(QuantType weight);
};
std::vector<Build> Builds() {
  std::vector<Build> builds;
  if (IsaSupported(Isa::kScalar)) {
    builds.push_back(
        {"scalar", [](QuantType t) { return FindVecDot(t, Isa::kScalar); }});
  }
  if (IsaSupported(Isa::kAvx2)) {
    builds.push_back(
        {"avx2", [](QuantType t) { return FindVecDot(t, Isa::kAvx2); }});
#ifdef FERRY_TEST_AVX512_EMULATION
    builds.push_back(
        {"avx512 emulated", quant_internal::emulated::Avx512VecDot});
#endif
  }
  if (IsaSupported(Isa::kAvx512)) {
    builds.push_back(
        {"avx512", [](QuantType t) { return FindVecDot(t, Isa::kAvx512); }});
  }
  return builds;
}

std::vector<float> RandomRow(std::mt19937& rng, int64_t n, float offset) {
  std::normal_distribution<float> dist(offset, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Quantizes weights and activations, returns {scalar-free reference, |terms|}
// where the reference is the double-precision dot of the dequantized rows.
struct Case {
  std::vector<uint8_t> w, act;
  double reference = 0, magnitude = 0;
  // q4_1 dots use the activation's block sum s, rounded to f16 once: the
  // kernels differ from the dequantized dot by up to |m * s| * 2^-11 a block.
  double slack = 0;
};

Case MakeCase(QuantType type, int64_t n, std::mt19937& rng) {
  Case c;
  const std::vector<float> wf = RandomRow(rng, n, 0.3f);
  const std::vector<float> af = RandomRow(rng, n, -0.1f);
  const QuantType act_type = *VecDotActivationType(type);
  c.w.resize(RowBytes(type, n));
  c.act.resize(RowBytes(act_type, n));
  EXPECT_THAT(QuantizeRow(type, wf.data(), c.w.data(), n), IsOk());
  EXPECT_THAT(QuantizeRow(act_type, af.data(), c.act.data(), n), IsOk());
  std::vector<float> wd(n), ad(n);
  EXPECT_THAT(DequantizeRow(type, c.w.data(), wd.data(), n), IsOk());
  EXPECT_THAT(DequantizeRow(act_type, c.act.data(), ad.data(), n), IsOk());
  for (int64_t i = 0; i < n; ++i) {
    c.reference += static_cast<double>(wd[i]) * ad[i];
    c.magnitude += std::fabs(static_cast<double>(wd[i]) * ad[i]);
  }
  if (type == QuantType::kQ5_1) {
    const auto* w = reinterpret_cast<const BlockQ5_1*>(c.w.data());
    const auto* a = reinterpret_cast<const BlockQ8_1*>(c.act.data());
    for (int64_t b = 0; b < n / kQK; ++b) {
      c.slack += std::fabs(F16ToF32(Half{w[b].m}) * F16ToF32(Half{a[b].s})) *
                 (1.0 / 2048);
    }
  }
  if (type == QuantType::kQ4_1) {
    const auto* w = reinterpret_cast<const BlockQ4_1*>(c.w.data());
    const auto* a = reinterpret_cast<const BlockQ8_1*>(c.act.data());
    for (int64_t b = 0; b < n / kQK; ++b) {
      c.slack += std::fabs(F16ToF32(Half{w[b].m}) * F16ToF32(Half{a[b].s})) *
                 (1.0 / 2048);
    }
  }
  return c;
}

TEST(VecDotTest, ActivationTypes) {
  EXPECT_EQ(*VecDotActivationType(QuantType::kQ4_0), QuantType::kQ8_0);
  EXPECT_EQ(*VecDotActivationType(QuantType::kQ4_1), QuantType::kQ8_1);
  EXPECT_EQ(*VecDotActivationType(QuantType::kQ8_0), QuantType::kQ8_0);
  EXPECT_EQ(*VecDotActivationType(QuantType::kBF16), QuantType::kF32);
  EXPECT_EQ(*VecDotActivationType(QuantType::kQ4_K), QuantType::kQ8_K);
  EXPECT_EQ(*VecDotActivationType(QuantType::kIQ4_XS), QuantType::kQ8_K);
  EXPECT_EQ(*VecDotActivationType(QuantType::kIQ4_NL), QuantType::kQ8_0);
  EXPECT_THAT(VecDotActivationType(QuantType::kIQ2_XXS),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_EQ(FindVecDot(QuantType::kIQ2_XXS, Isa::kScalar), nullptr);
  EXPECT_EQ(FindVecDot(QuantType::kIQ2_XXS), nullptr);
  EXPECT_EQ(FindVecDot(QuantType::kQ8_K), nullptr);
  for (QuantType type : kWeightTypes) {
    EXPECT_TRUE(IsaSupported(PreferredIsa(type)));
    EXPECT_EQ(FindVecDot(type), FindVecDot(type, PreferredIsa(type)));
  }
}

TEST(VecDotTest, EveryIsaMatchesScalarAndDequantizedReference) {
  std::printf("best ISA here: %s\n", std::string(IsaName(BestIsa())).c_str());
  std::mt19937 rng(7);
  for (QuantType type : kWeightTypes) {
    const VecDotFn scalar = FindVecDot(type, Isa::kScalar);
    ASSERT_NE(scalar, nullptr) << QuantTypeName(type);
    // Lengths with 1, 3, 18 (SmolLM2's 576) and 48 (1536) blocks and more;
    // super-block types: 1, 3, 6 (1536) and 16.
    const bool super = BlockSize(type) == 256;
    for (int64_t n : super
                         ? std::vector<int64_t>{256, 768, 1536, 4096}
                         : std::vector<int64_t>{32, 96, 160, 576, 1536, 4096}) {
      const Case c = MakeCase(type, n, rng);
      // The integer block sums are exact, so the integer paths differ from
      // the double reference only by float rounding of per-block products.
      const double tol = c.magnitude * 1e-5 + 1e-5;
      const float s = scalar(c.w.data(), c.act.data(), n);
      EXPECT_NEAR(s, c.reference, tol + c.slack)
          << QuantTypeName(type) << " n=" << n;
      for (Isa isa : kIsas) {
        if (!IsaSupported(isa)) {
          EXPECT_EQ(FindVecDot(type, isa), nullptr);
        }
      }
      for (const Build& build : Builds()) {
        const VecDotFn fn = build.find(type);
        ASSERT_NE(fn, nullptr) << QuantTypeName(type) << " " << build.name;
        const float v = fn(c.w.data(), c.act.data(), n);
        EXPECT_NEAR(v, s, tol)
            << QuantTypeName(type) << " " << build.name << " n=" << n;
      }
    }
  }
}

TEST(VecDotTest, ConvenienceChecksItsArguments) {
  std::mt19937 rng(5);
  const Case c = MakeCase(QuantType::kQ4_1, 64, rng);
  auto v = VecDot(QuantType::kQ4_1, c.w.data(), c.act.data(), 64);
  ASSERT_THAT(v, IsOk());
  EXPECT_NEAR(*v, c.reference, c.magnitude * 1e-5 + c.slack + 1e-5);
  EXPECT_THAT(VecDot(QuantType::kQ4_1, c.w.data(), c.act.data(), 48),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(VecDot(QuantType::kIQ2_XXS, c.w.data(), c.act.data(), 256),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(VecDot(QuantType::kQ4_K, c.w.data(), c.act.data(), 64),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Odd float lengths exercise the SIMD tails.
TEST(VecDotTest, FloatTailsOnEveryIsa) {
  std::mt19937 rng(3);
  for (QuantType type : {QuantType::kF32, QuantType::kF16, QuantType::kBF16}) {
    for (int64_t n : {1, 7, 8, 15, 17, 31, 33, 47, 100}) {
      const Case c = MakeCase(type, n, rng);
      for (const Build& build : Builds()) {
        const float v = build.find(type)(c.w.data(), c.act.data(), n);
        EXPECT_NEAR(v, c.reference, c.magnitude * 1e-5 + 1e-6)
            << QuantTypeName(type) << " " << build.name << " n=" << n;
      }
    }
  }
}

// q8_0 weights from a file may hold -128 (our quantizer never makes it);
// |-128| must be read as 128 by the sign trick.
TEST(VecDotTest, Q8_0WeightMinus128) {
  std::vector<BlockQ8_0> w(3), a(3);
  for (int b = 0; b < 3; ++b) {
    w[b].d = F32ToF16(0.5f).bits;
    a[b].d = F32ToF16(0.25f).bits;
    for (int j = 0; j < 32; ++j) {
      w[b].qs[j] = static_cast<int8_t>(j % 2 == 0 ? -128 : 127);
      a[b].qs[j] = static_cast<int8_t>(j % 3 == 0 ? -127 : 127);
    }
  }
  double expected = 0;
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 32; ++j) expected += w[b].qs[j] * a[b].qs[j] * 0.125;
  }
  for (const Build& build : Builds()) {
    EXPECT_FLOAT_EQ(build.find(QuantType::kQ8_0)(w.data(), a.data(), 96),
                    expected)
        << build.name;
  }
}

// Weights as files may hold them: every bit pattern of quants and scales
// (q6_K's scale -128, q3_K's -32, iq4_xs' extremes), with sane f16 factors.
// Every ISA agrees with the scalar kernel, and the scalar kernel with the
// dequantized dot.
TEST(VecDotTest, KWeightsOfRandomBytesOnEveryIsa) {
  std::mt19937 rng(11);
  for (QuantType type :
       {QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K,
        QuantType::kQ6_K, QuantType::kIQ4_NL, QuantType::kIQ4_XS}) {
    const int64_t n = 1024;
    std::vector<uint8_t> w(RowBytes(type, n));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    // The f16 fields: d (and dmin) where each layout keeps them.
    const int64_t block = BlockBytes(type);
    for (int64_t off = 0; off < static_cast<int64_t>(w.size()); off += block) {
      const uint16_t d = F32ToF16(0.01f + (rng() % 100) * 1e-4f).bits;
      const uint16_t dmin = F32ToF16((rng() % 100) * 1e-4f).bits;
      auto put = [&](int64_t at, uint16_t v) {
        std::memcpy(w.data() + off + at, &v, 2);
      };
      switch (type) {
        case QuantType::kQ2_K:
          put(80, d);
          put(82, dmin);
          break;
        case QuantType::kQ3_K:
          put(108, d);
          break;
        case QuantType::kQ6_K:
          put(208, d);
          break;
        case QuantType::kQ4_K:
        case QuantType::kQ5_K:
          put(0, d);
          put(2, dmin);
          break;
        default:  // iq4: d first.
          put(0, d);
          break;
      }
    }
    const QuantType act_type = *VecDotActivationType(type);
    const std::vector<float> af = RandomRow(rng, n, 0.0f);
    std::vector<uint8_t> act(RowBytes(act_type, n));
    ASSERT_THAT(QuantizeRow(act_type, af.data(), act.data(), n), IsOk());
    std::vector<float> wd(n), ad(n);
    ASSERT_THAT(DequantizeRow(type, w.data(), wd.data(), n), IsOk());
    ASSERT_THAT(DequantizeRow(act_type, act.data(), ad.data(), n), IsOk());
    double reference = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      reference += static_cast<double>(wd[i]) * ad[i];
      magnitude += std::fabs(static_cast<double>(wd[i]) * ad[i]);
    }
    const double tol = magnitude * 1e-5 + 1e-5;
    const float s = FindVecDot(type, Isa::kScalar)(w.data(), act.data(), n);
    EXPECT_NEAR(s, reference, tol) << QuantTypeName(type);
    for (const Build& build : Builds()) {
      EXPECT_NEAR(build.find(type)(w.data(), act.data(), n), s, tol)
          << QuantTypeName(type) << " " << build.name;
    }
  }
}

}  // namespace
}  // namespace ferry::quant
