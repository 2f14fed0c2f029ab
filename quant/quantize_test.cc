// Quantize and dequantize against rows the python gguf package produced
// (testdata/make_golden.py): identical bytes and identical floats.
#include "ferry/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/dequantize.h"
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
// 127, q = roundf(x / d)), byte for byte: random blocks of many magnitudes,
// all-zero blocks, and exact halves (x / d = k + 0.5, which roundf takes
// away from zero and round-to-nearest-even would not).
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
    const float id = d != 0 ? 1.0f / d : 0.0f;
    int8_t want[kQK];
    int want_sum = 0;
    for (int j = 0; j < kQK; ++j) {
      want[j] = static_cast<int8_t>(std::roundf(x[j] * id));
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
  EXPECT_THAT(QuantizeRow(QuantType::kQ6_K, x.data(), q.data(), 256),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(DequantizeRow(QuantType::kIQ2_XXS, q.data(), x.data(), 256),
              StatusIs(absl::StatusCode::kUnimplemented));
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
