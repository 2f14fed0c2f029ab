// Quantize and dequantize against rows the python gguf package produced
// (testdata/make_golden.py): identical bytes and identical floats.
#include "ferry/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/internal/k_scales.h"
#include "ferry/quant/internal/quantize_avx2.h"
#include "ferry/quant/quant_type.h"
#include "ferry/runtime/cpu_features.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::quant {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

struct GoldenRow {
  uint32_t type;
  std::vector<float> input;
  std::vector<uint8_t> quantized;
  std::vector<float> dequantized;
};

struct Golden {
  struct TypeEntry {
    uint32_t id, block_size, block_bytes;
  };
  std::vector<TypeEntry> types;
  std::vector<GoldenRow> rows;
};

class Reader {
 public:
  explicit Reader(std::string bytes) : bytes_(std::move(bytes)) {}
  uint32_t U32() {
    uint32_t v = 0;
    Copy(&v, 4);
    return v;
  }
  template <typename T>
  std::vector<T> Vec(size_t n) {
    std::vector<T> v(n);
    Copy(v.data(), n * sizeof(T));
    return v;
  }
  bool ok() const { return ok_; }

 private:
  void Copy(void* dst, size_t n) {
    if (pos_ + n > bytes_.size()) {
      ok_ = false;
      return;
    }
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::string bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

Golden LoadGolden() {
  std::ifstream in("quant/testdata/golden.bin", std::ios::binary);
  EXPECT_TRUE(in) << "quant/testdata/golden.bin missing";
  Reader r(std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>()));
  Golden g;
  const uint32_t n_types = r.U32();
  for (uint32_t i = 0; i < n_types && r.ok(); ++i) {
    Golden::TypeEntry e;
    e.id = r.U32();
    e.block_size = r.U32();
    e.block_bytes = r.U32();
    g.types.push_back(e);
  }
  const uint32_t n_rows = r.U32();
  for (uint32_t i = 0; i < n_rows && r.ok(); ++i) {
    GoldenRow row;
    row.type = r.U32();
    const uint32_t n = r.U32();
    row.input = r.Vec<float>(n);
    row.quantized = r.Vec<uint8_t>(r.U32());
    row.dequantized = r.Vec<float>(n);
    g.rows.push_back(std::move(row));
  }
  EXPECT_TRUE(r.ok()) << "golden.bin truncated";
  return g;
}

bool SameFloat(float a, float b) {
  return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0;
}

TEST(QuantizeTest, TypeTableMatchesPythonGguf) {
  const Golden g = LoadGolden();
  ASSERT_GT(g.types.size(), 30u);
  for (const auto& e : g.types) {
    const QuantTypeInfo* info = FindQuantTypeInfo(e.id);
    ASSERT_NE(info, nullptr) << "type id " << e.id;
    EXPECT_EQ(info->block_size, e.block_size) << info->name;
    // gguf-py still lists q8_1 with f32 d and s (40 bytes); ggml's block_q8_1
    // holds two halves (36). Q8_1 never occurs in files; we follow ggml.
    if (info->type == QuantType::kQ8_1) continue;
    EXPECT_EQ(info->block_bytes, e.block_bytes) << info->name;
  }
}

TEST(QuantizeTest, MatchesPythonGgufBitForBit) {
  const Golden g = LoadGolden();
  ASSERT_EQ(g.rows.size(), 32u);
  for (const GoldenRow& row : g.rows) {
    const QuantType type = *QuantTypeFromId(row.type);
    const int64_t n = static_cast<int64_t>(row.input.size());
    SCOPED_TRACE(absl::StrCat(QuantTypeName(type), " n=", n));
    ASSERT_EQ(RowBytes(type, n), static_cast<int64_t>(row.quantized.size()));

    std::vector<uint8_t> bytes(row.quantized.size());
    ASSERT_THAT(QuantizeRow(type, row.input.data(), bytes.data(), n), IsOk());
    EXPECT_EQ(bytes, row.quantized);

    std::vector<float> out(n);
    ASSERT_THAT(DequantizeRow(type, row.quantized.data(), out.data(), n),
                IsOk());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameFloat(out[i], row.dequantized[i]))
          << "element " << i << ": " << out[i] << " vs python "
          << row.dequantized[i];
    }
  }
}

TEST(QuantizeTest, Q8_1StoresScaledSum) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.3f * i) * 3;
  std::vector<BlockQ8_1> q(2);
  ASSERT_THAT(QuantizeRow(QuantType::kQ8_1, x.data(), q.data(), 64), IsOk());
  std::vector<float> back(64);
  ASSERT_THAT(DequantizeRow(QuantType::kQ8_1, q.data(), back.data(), 64),
              IsOk());
  for (int b = 0; b < 2; ++b) {
    float sum = 0;
    for (int j = 0; j < 32; ++j) sum += back[b * 32 + j];
    EXPECT_NEAR(F16ToF32(Half{q[b].s}), sum, std::fabs(sum) * 1e-3 + 1e-3);
  }
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(back[i], x[i], 3.0f / 127);
}

// The AVX2 activation rounding against the scalar definition (d = max|x| /
// 127, q = x * (127 / max|x|) rounded to nearest, ties to even, as ggml's
// x86 code does), byte for byte: random blocks of many magnitudes, all-zero
// blocks, and exact halves (x * 127 / max|x| = k + 0.5, which roundf would
// take away from zero).
TEST(QuantizeTest, Q8BlockAvx2MatchesScalarDefinition) {
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(5);
  std::vector<std::vector<float>> blocks;
  for (float scale : {1e-30f, 1e-3f, 1.0f, 7.0f, 1e4f}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::uniform_real_distribution<float> dist(-scale, scale);
      std::vector<float> x(kQK);
      for (float& v : x) v = dist(rng);
      blocks.push_back(x);
    }
  }
  blocks.push_back(std::vector<float>(kQK, 0.0f));
  std::vector<float> halves(kQK);
  for (int j = 0; j < kQK; ++j) {
    // amax 127 makes d = 1: each value is its own x / d.
    halves[j] = j == 0 ? 127.0f : ((j % 2 ? 1 : -1) * (j * 3.5f + 0.5f));
  }
  halves[1] = 0.49999997f;
  halves[2] = -1.4999999f;
  blocks.push_back(halves);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::vector<float>& x = blocks[i];
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float d = amax / 127;
    const float id = amax != 0 ? 127 / amax : 0.0f;
    int8_t want[kQK];
    int want_sum = 0;
    for (int j = 0; j < kQK; ++j) {
      want[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
      want_sum += want[j];
    }
    int8_t got[kQK];
    int got_sum = 0;
    EXPECT_EQ(quant_internal::QuantizeQ8BlockAvx2(x.data(), got, &got_sum), d)
        << "block " << i;
    EXPECT_EQ(got_sum, want_sum) << "block " << i;
    for (int j = 0; j < kQK; ++j) {
      EXPECT_EQ(got[j], want[j])
          << "block " << i << " j=" << j << " x=" << x[j];
    }
  }
}

// The AVX2 row functions against the block function and F32ToF16 (the
// scalar rows' conversion) for d and q8_1's s: f16 normals, subnormals
// (d near 1e-5), zero (1e-30 / 127 underflows), overflow to infinity (d
// above 65504) and s = 0 * inf = NaN.
TEST(QuantizeTest, Q8RowsAvx2MatchBlocksAndF32ToF16) {
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  std::vector<float> x;
  for (float scale : {1e-30f, 1e-3f, 2e-3f, 1.0f, 7.0f, 1e4f, 1e7f}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::uniform_real_distribution<float> dist(-scale, scale);
      for (int j = 0; j < kQK; ++j) x.push_back(dist(rng));
    }
  }
  // One block of +inf and zeros: d = inf, sum 0, s = NaN.
  for (int j = 0; j < kQK; ++j) {
    x.push_back(j == 0 ? std::numeric_limits<float>::infinity() : 0.0f);
  }
  const int64_t blocks = static_cast<int64_t>(x.size()) / kQK;
  std::vector<BlockQ8_0> y0(blocks);
  std::vector<BlockQ8_1> y1(blocks);
  quant_internal::QuantizeQ8_0RowAvx2(x.data(), y0.data(), blocks);
  quant_internal::QuantizeQ8_1RowAvx2(x.data(), y1.data(), blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t qs[kQK];
    int sum = 0;
    const float d =
        quant_internal::QuantizeQ8BlockAvx2(x.data() + b * kQK, qs, &sum);
    EXPECT_EQ(y0[b].d, F32ToF16(d).bits) << "block " << b << " d=" << d;
    EXPECT_EQ(y1[b].d, F32ToF16(d).bits) << "block " << b << " d=" << d;
    EXPECT_EQ(y1[b].s, F32ToF16(static_cast<float>(sum) * d).bits)
        << "block " << b;
    EXPECT_EQ(std::memcmp(y0[b].qs, qs, kQK), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(y1[b].qs, qs, kQK), 0) << "block " << b;
  }
}

// Activations round as llama.cpp's do on x86: ties to even (roundf would
// give 3, -3, 4 and 1 below).
TEST(QuantizeTest, Q8_0RoundsTiesToEven) {
  std::vector<float> x(kQK, 0.0f);
  x[0] = 127;  // d = 1: each value is its own quant.
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  x[4] = 0.5f;
  BlockQ8_0 q;
  ASSERT_THAT(QuantizeRow(QuantType::kQ8_0, x.data(), &q, kQK), IsOk());
  EXPECT_EQ(q.qs[0], 127);
  EXPECT_EQ(q.qs[1], 2);
  EXPECT_EQ(q.qs[2], -2);
  EXPECT_EQ(q.qs[3], 4);
  EXPECT_EQ(q.qs[4], 0);
}

TEST(QuantizeTest, RoundTripErrorWithinHalfAStep) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = std::cos(0.1f * i) * (1 + i % 7);
  for (QuantType type : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                         QuantType::kQ5_1, QuantType::kQ8_0}) {
    std::vector<uint8_t> q(RowBytes(type, 256));
    ASSERT_THAT(QuantizeRow(type, x.data(), q.data(), 256), IsOk());
    std::vector<float> back(256);
    ASSERT_THAT(DequantizeRow(type, q.data(), back.data(), 256), IsOk());
    for (int b = 0; b < 8; ++b) {
      float lo = x[b * 32], hi = x[b * 32];
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[b * 32 + j]);
        hi = std::max(hi, x[b * 32 + j]);
      }
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      const float step = type == QuantType::kQ4_1   ? (hi - lo) / 15
                         : type == QuantType::kQ5_1 ? (hi - lo) / 31
                         : type == QuantType::kQ4_0 ? amax / 8
                         : type == QuantType::kQ5_0 ? amax / 16
                                                    : amax / 127;
      // Half a step, plus f16 rounding of the scale over up to 16 steps;
      // q4_0 maps the signed extreme to -8, so the other side's extreme only
      // reaches +7 steps: a whole step there.
      const float bound =
          step * (type == QuantType::kQ4_0 || type == QuantType::kQ5_0 ? 1.0f
                                                                       : 0.5f) +
          amax * 2e-3f;
      for (int j = 0; j < 32; ++j) {
        EXPECT_LE(std::fabs(back[b * 32 + j] - x[b * 32 + j]), bound)
            << QuantTypeName(type) << " block " << b << " element " << j;
      }
    }
  }
}

TEST(QuantizeTest, RejectsBadLengthsAndUnsupportedTypes) {
  std::vector<float> x(64);
  std::vector<uint8_t> q(256);
  EXPECT_THAT(QuantizeRow(QuantType::kQ4_0, x.data(), q.data(), 31),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DequantizeRow(QuantType::kQ8_0, q.data(), x.data(), 48),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(QuantizeRow(QuantType::kIQ2_XXS, x.data(), q.data(), 256),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(QuantizeRow(QuantType::kQ4_K, x.data(), q.data(), 64),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DequantizeRow(QuantType::kQ6_K, q.data(), x.data(), 32),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DequantizeRow(QuantType::kIQ2_XXS, q.data(), x.data(), 256),
              StatusIs(absl::StatusCode::kUnimplemented));
}

// K-quant and iq4 rows (testdata/make_golden_k.py): bytes from ggml's
// reference quantizers, floats from the python gguf package.
std::vector<std::pair<GoldenRow, bool>> LoadGoldenK() {
  std::ifstream in("quant/testdata/golden_k.bin", std::ios::binary);
  EXPECT_TRUE(in) << "quant/testdata/golden_k.bin missing";
  Reader r(std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>()));
  std::vector<std::pair<GoldenRow, bool>> rows;
  const uint32_t n_rows = r.U32();
  for (uint32_t i = 0; i < n_rows && r.ok(); ++i) {
    GoldenRow row;
    row.type = r.U32();
    const uint32_t n = r.U32();
    row.input = r.Vec<float>(n);
    row.quantized = r.Vec<uint8_t>(r.U32());
    row.dequantized = r.Vec<float>(n);
    const bool exact = r.U32() != 0;
    rows.emplace_back(std::move(row), exact);
  }
  EXPECT_TRUE(r.ok()) << "golden_k.bin truncated";
  return rows;
}

constexpr QuantType kKTypes[] = {
    QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K,   QuantType::kQ5_K,
    QuantType::kQ6_K, QuantType::kQ8_K, QuantType::kIQ4_NL, QuantType::kIQ4_XS};

// Dequantization of ggml's bytes (its quantizers' output and random bytes)
// gives the python package's floats bit for bit; q8_K quantizes to ggml's
// bytes.
TEST(QuantizeTest, KTypesMatchGgmlAndPythonGguf) {
  const auto rows = LoadGoldenK();
  ASSERT_EQ(rows.size(), 56u);
  int exact_rows = 0;
  for (const auto& [row, exact] : rows) {
    const QuantType type = *QuantTypeFromId(row.type);
    const int64_t n = static_cast<int64_t>(row.input.size());
    SCOPED_TRACE(absl::StrCat(QuantTypeName(type), " n=", n));
    ASSERT_EQ(RowBytes(type, n), static_cast<int64_t>(row.quantized.size()));
    // Copied for alignment (q8_K's f32 d).
    std::vector<uint32_t> aligned((row.quantized.size() + 3) / 4);
    std::memcpy(aligned.data(), row.quantized.data(), row.quantized.size());
    std::vector<float> out(n);
    ASSERT_THAT(DequantizeRow(type, aligned.data(), out.data(), n), IsOk());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(SameFloat(out[i], row.dequantized[i]))
          << "element " << i << ": " << out[i] << " vs python "
          << row.dequantized[i];
    }
    if (!exact) continue;
    ++exact_rows;
    std::vector<uint32_t> bytes(aligned.size());
    ASSERT_THAT(QuantizeRow(type, row.input.data(), bytes.data(), n), IsOk());
    EXPECT_EQ(
        std::memcmp(bytes.data(), row.quantized.data(), row.quantized.size()),
        0);
  }
  EXPECT_EQ(exact_rows, 5);
}

// Each sub-block keeps its values within a fraction of the super-block's
// range: the quantizers' scales and quants are consistent with the
// dequantizers' reading of them.
TEST(QuantizeTest, KTypesRoundTrip) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.2f, 1.0f);
  const int64_t n = 1024;
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  for (int i = 0; i < 32; ++i) x[256 + i] = 0;    // A zero sub-block.
  for (int i = 512; i < 768; ++i) x[i] *= 1e-3f;  // A quiet super-block.
  for (QuantType type : kKTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    std::vector<uint32_t> q((RowBytes(type, n) + 3) / 4);
    ASSERT_THAT(QuantizeRow(type, x.data(), q.data(), n), IsOk());
    std::vector<float> back(n);
    ASSERT_THAT(DequantizeRow(type, q.data(), back.data(), n), IsOk());
    // Worst relative error (to the super-block's largest magnitude) by
    // quant width: 2, 3, 4, 5, 6, 8 bits; iq4's grid steps reach 24 / 254.
    const double bound = type == QuantType::kQ2_K   ? 0.40
                         : type == QuantType::kQ3_K ? 0.20
                         : type == QuantType::kQ4_K ? 0.09
                         : type == QuantType::kQ5_K ? 0.05
                         : type == QuantType::kQ6_K ? 0.025
                         : type == QuantType::kQ8_K ? 0.005
                                                    : 0.12;
    double sq = 0, sq_ref = 0;
    for (int64_t s = 0; s < n / 256; ++s) {
      float amax = 0;
      for (int i = 0; i < 256; ++i) {
        amax = std::max(amax, std::fabs(x[s * 256 + i]));
      }
      for (int i = 0; i < 256; ++i) {
        const int64_t e = s * 256 + i;
        ASSERT_LE(std::fabs(back[e] - x[e]), bound * amax)
            << "element " << e << ": " << back[e] << " for " << x[e];
        sq += (back[e] - x[e]) * (back[e] - x[e]);
        sq_ref += x[e] * x[e];
      }
    }
    std::printf("%s: rms error / rms %.4f\n",
                std::string(QuantTypeName(type)).c_str(),
                std::sqrt(sq / sq_ref));
  }
}

// The 6-bit scale packings invert each other on every value.
TEST(QuantizeTest, KScalePackingsRoundTrip) {
  for (int v = 0; v < 64; ++v) {
    uint8_t sc[8], m[8], packed[12], sc2[8], m2[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>((v + 7 * j) % 64);
      m[j] = static_cast<uint8_t>((v + 13 * j + 1) % 64);
    }
    quant_internal::PackScaleMinK4(sc, m, packed);
    quant_internal::UnpackScaleMinK4(packed, sc2, m2);
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(sc2[j], sc[j]);
      EXPECT_EQ(m2[j], m[j]);
    }
    int8_t s3[16], s3b[16];
    for (int j = 0; j < 16; ++j)
      s3[j] = static_cast<int8_t>((v + 5 * j) % 64 - 32);
    quant_internal::PackScalesQ3K(s3, packed);
    quant_internal::UnpackScalesQ3K(packed, s3b);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(s3b[j], s3[j]);
  }
}

}  // namespace
}  // namespace ferry::quant

namespace ferry::quant {
namespace {

// Every ISA's dequantizer gives the scalar code's bits, on random bytes
// (any scale, subnormal, infinite or NaN; NaNs compare as NaN).
TEST(DequantizeTest, EveryIsaMatchesScalar) {
  std::mt19937 rng(5);
  for (QuantType type :
       {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
        QuantType::kQ8_0, QuantType::kQ8_1}) {
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (!IsaSupported(isa)) continue;
      SCOPED_TRACE(absl::StrCat(QuantTypeName(type), " ", IsaName(isa)));
      const int64_t n = 32 * 37;
      std::vector<uint8_t> bytes(static_cast<size_t>(RowBytes(type, n)));
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      std::vector<float> want(n), got(n, -1.0f);
      ASSERT_THAT(DequantizeRowWithIsa(type, bytes.data(), want.data(), n,
                                       Isa::kScalar),
                  IsOk());
      ASSERT_THAT(DequantizeRowWithIsa(type, bytes.data(), got.data(), n, isa),
                  IsOk());
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool same = (std::isnan(want[i]) && std::isnan(got[i])) ||
                          std::memcmp(&want[i], &got[i], sizeof(float)) == 0;
        if (!same && ++bad <= 3) {
          ADD_FAILURE() << "element " << i << ": " << got[i] << ", want "
                        << want[i];
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

}  // namespace
}  // namespace ferry::quant
