#include "ferry/backends/host/internal/quant_mat_mul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/internal/quant_group_layout.h"
#include "ferry/backends/host/internal/quant_tile_kernels.h"
#include "ferry/backends/host/vec_dot.h"
#include "ferry/graph/dtype.h"
#include "ferry/quant/block_formats.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/quant/quant_type.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/cpu_features.h"
#include "ferry/runtime/sanitizer_build.h"
#include "gtest/gtest.h"

namespace ferry {
namespace cpu_internal {
namespace {

using quant::QuantType;

constexpr float kSentinel = -12345.0f;

struct Shape {
  int64_t m;
  int64_t n;
  int64_t k;
};

// Rows of `rows` x `k` uniform values in [-1, 1) quantized to `type`, with
// their dequantized values (what the kernel's products stand for).
struct QuantRows {
  std::vector<std::byte> bytes;
  std::vector<float> values;
  int64_t row_bytes;
};

QuantRows Quantize(QuantType type, const std::vector<float>& x, int64_t rows,
                   int64_t k) {
  QuantRows q;
  q.row_bytes = quant::RowBytes(type, k);
  q.bytes.resize(static_cast<size_t>(rows * q.row_bytes));
  q.values.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(quant::QuantizeRow(type, x.data() + r * k,
                                   q.bytes.data() + r * q.row_bytes, k)
                    .ok());
    EXPECT_TRUE(quant::DequantizeRow(type, q.bytes.data() + r * q.row_bytes,
                                     q.values.data() + r * k, k)
                    .ok());
  }
  return q;
}

// For weights with a minimum (q4_1, q5_1: x = d q + m), vec_dot adds each
// block's m times the activation block's stored s (f16 of d * sum(q))
// instead of m times the sum of its dequantized values: the difference,
// which the dequantized product lacks.
double MinTermCorrection(QuantType type, const QuantRows& a,
                         const QuantRows& act, int64_t i, int64_t j,
                         int64_t k) {
  if (type != QuantType::kQ4_1 && type != QuantType::kQ5_1) return 0;
  double correction = 0;
  const int64_t w_block = quant::BlockBytes(type);
  for (int64_t blk = 0; blk < k / quant::kQK; ++blk) {
    // Both types start with f16 d, f16 m; q8_1 with f16 d, f16 s.
    Half m, s;
    std::memcpy(&m, a.bytes.data() + i * a.row_bytes + blk * w_block + 2, 2);
    std::memcpy(&s,
                act.bytes.data() + j * act.row_bytes +
                    blk * static_cast<int64_t>(sizeof(quant::BlockQ8_1)) + 2,
                2);
    double act_sum = 0;
    for (int64_t l = blk * quant::kQK; l < (blk + 1) * quant::kQK; ++l) {
      act_sum += act.values[j * k + l];
    }
    correction += F16ToF32(m) * (F16ToF32(s) - act_sum);
  }
  return correction;
}

std::vector<float> Uniform(size_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs QuantMatMul on nth threads (each with its own scratch), optionally
// sharing a work counter, and returns dst (n rows of ldc = m + 3 floats).
std::vector<float> RunThreads(const QuantMatMulArgs& base, int nth,
                              bool counter, Isa isa) {
  QuantMatMulArgs args = base;
  std::vector<float> dst(static_cast<size_t>(args.n * args.ldc), kSentinel);
  args.dst = dst.data();
  std::atomic<int64_t> next{0};
  if (counter) args.next = &next;
  const size_t scratch = QuantMatMulScratchBytes(
      args.a_type, args.m, args.n, args.k, nth, args.min_gemm_tokens);
  // 64-byte aligned, as the CPU kernels' scratch slices are.
  struct AlignedFree {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<std::byte, AlignedFree>> scratches;
  for (int i = 0; i < nth; ++i) {
    scratches.emplace_back(static_cast<std::byte*>(
        std::aligned_alloc(64, (scratch + 63) / 64 * 64)));
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < nth; ++i) {
    threads.emplace_back([&, i] {
      QuantMatMul(args, i, nth, scratches[static_cast<size_t>(i)].get(), isa);
    });
  }
  QuantMatMul(args, 0, nth, scratches[0].get(), isa);
  for (std::thread& t : threads) t.join();
  return dst;
}

using Param = std::tuple<QuantType, Isa>;

class QuantMatMulTest : public ::testing::TestWithParam<Param> {};

// Runs every path that shape `s` takes (the dequantized GEMM from
// kMinGemmTokens, integer dots, grouped weights where m makes whole groups)
// on 1-3 threads, with and without a work counter, for weights `w` (m x k)
// and activations `b` (n rows, ldb apart), and expects each output to equal
// the dot product of the dequantized weight row with the activation row
// (rounded to the vec_dot format below kMinGemmTokens), up to float
// summation order (relative to the sum of |products|); padding of dst is
// left alone. Under a sanitizer the single-thread runs are left out.
void ExpectPathsMatchDequantized(QuantType type, Isa isa, Shape s,
                                 const std::vector<float>& w,
                                 const std::vector<float>& b, int64_t ldb) {
  const QuantType act_type = *quant::VecDotActivationType(type);
  const QuantRows a = Quantize(type, w, s.m, s.k);
  std::vector<float> b_rows;
  for (int64_t j = 0; j < s.n; ++j) {
    b_rows.insert(b_rows.end(), b.begin() + j * ldb, b.begin() + j * ldb + s.k);
  }
  const QuantRows act = Quantize(act_type, b_rows, s.n, s.k);
  QuantMatMulArgs args;
  args.a_type = type;
  args.a = a.bytes.data();
  args.a_row_bytes = a.row_bytes;
  args.b = b.data();
  args.ldb = ldb;
  args.ldc = s.m + 3;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  // Weights whose rows make whole groups also as CpuPackedBuffer
  // stores them (QuantGroupLayout).
  const bool groupable =
      QuantGroupLayout::Packable(*quant::DTypeOf(type), {s.k, s.m, 1, 1});
  std::vector<std::byte> grouped_bytes(a.bytes.size());
  if (groupable) {
    QuantGroupLayout(*quant::DTypeOf(type), {s.k, s.m, 1, 1})
        .Pack(a.bytes.data(), 0, a.bytes.size(), grouped_bytes.data());
  }
  // Many tokens: the GEMM path, and the vec_dot path forced. The vec_dot
  // path multiplies by b rounded to act_type, the GEMM path by b itself.
  for (const int path : {0, 1, 2}) {
    const bool gemm = path == 1;
    const bool grouped = path == 2;
    if (gemm && s.n < kMinGemmTokens) continue;
    if (grouped && !groupable) continue;
    args.a_grouped = grouped;
    args.a = grouped ? grouped_bytes.data() : a.bytes.data();
    args.min_gemm_tokens =
        gemm ? kMinGemmTokens : std::numeric_limits<int64_t>::max();
    const std::vector<float>& b_values = gemm ? b_rows : act.values;
    for (int nth : {1, 2, 3}) {
      if (kSanitizerBuild && nth == 1) continue;
      for (bool counter : {false, true}) {
        SCOPED_TRACE(absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k,
                                  " nth=", nth, " counter=", counter,
                                  " gemm=", gemm, " grouped=", grouped));
        const std::vector<float> dst = RunThreads(args, nth, counter, isa);
        int bad = 0;
        for (int64_t j = 0; j < s.n; ++j) {
          for (int64_t i = 0; i < args.ldc; ++i) {
            const float got = dst[static_cast<size_t>(j * args.ldc + i)];
            if (i >= s.m) {
              bad += got != kSentinel;
              continue;
            }
            double want = 0, scale = 0;
            for (int64_t l = 0; l < s.k; ++l) {
              const double p = static_cast<double>(a.values[i * s.k + l]) *
                               b_values[j * s.k + l];
              want += p;
              scale += std::fabs(p);
            }
            if (!gemm) want += MinTermCorrection(type, a, act, i, j, s.k);
            // Fails on NaN: the comparison is false.
            if (!(std::fabs(got - want) <= 2e-5 * scale + 1e-6)) {
              if (++bad <= 3) {
                ADD_FAILURE() << "dst[" << j << "][" << i << "] = " << got
                              << ", want " << want;
              }
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// Uniform values. Shapes: one token (GEMV), 2-7 tokens (weight-row split),
// 16 (token split), 32-512 (dequantized GEMM); k = 32 * odd, so not a
// multiple of any SIMD width's blocks. Under a sanitizer the largest token
// counts are left out.
TEST_P(QuantMatMulTest, MatchesDequantizedProducts) {
  const auto [type, isa] = GetParam();
  if (!IsaSupported(isa)) {
    GTEST_SKIP() << IsaName(isa) << " unsupported here";
  }
  std::mt19937 rng(7);
  for (Shape s :
       {Shape{1, 1, 32}, Shape{37, 1, 576}, Shape{24, 1, 160}, Shape{64, 2, 96},
        Shape{33, 7, 160}, Shape{17, 16, 224}, Shape{48, 32, 96},
        Shape{19, 100, 160}, Shape{40, 512, 96}, Shape{520, 64, 64}}) {
    // Super-block types: 1 to 3 blocks of 256 (their kernels have no tails
    // within a row; longer rows only cost test time).
    if (quant::BlockSize(type) > quant::kQK) {
      s.k = std::min<int64_t>(s.k / quant::kQK, 3) * quant::BlockSize(type);
    }
    if (kSanitizerBuild && s.n > 64) continue;
    // m >= 512 only changes the GEMM path (panels), which has no quant ISA.
    if (s.m >= 512 && isa != Isa::kScalar) continue;
    const std::vector<float> w = Uniform(static_cast<size_t>(s.m * s.k), rng);
    // b with a row stride beyond k, to check ldb is used.
    const int64_t ldb = s.k + 5;
    const std::vector<float> b = Uniform(static_cast<size_t>(s.n * ldb), rng);
    ExpectPathsMatchDequantized(type, isa, s, w, b, ldb);
  }
}

// Blocks that store their largest values (each block -1 then all 1: q5's
// 31, q4's 15, q8's 127) against activations of one sign (all 1 or all -1,
// so 127 each): the integer sums are as large as they get, and a kernel
// that adds too many products in 16 bits before widening overflows.
TEST_P(QuantMatMulTest, LargestSumsDoNotOverflow) {
  const auto [type, isa] = GetParam();
  if (!IsaSupported(isa)) {
    GTEST_SKIP() << IsaName(isa) << " unsupported here";
  }
  const int64_t block = quant::BlockSize(type);
  const Shape s{16, 5, 2 * std::max<int64_t>(block, quant::kQK)};
  std::vector<float> w(static_cast<size_t>(s.m * s.k), 1.0f);
  for (size_t i = 0; i < w.size(); i += static_cast<size_t>(block)) {
    w[i] = -1.0f;
  }
  std::vector<float> b(static_cast<size_t>(s.n * s.k));
  for (int64_t j = 0; j < s.n; ++j) {
    std::fill_n(b.begin() + j * s.k, s.k, j % 2 == 0 ? 1.0f : -1.0f);
  }
  ExpectPathsMatchDequantized(type, isa, s, w, b, s.k);
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndIsas, QuantMatMulTest,
    ::testing::Combine(
        ::testing::Values(QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
                          QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ2_K,
                          QuantType::kQ3_K, QuantType::kQ4_K, QuantType::kQ5_K,
                          QuantType::kQ6_K, QuantType::kIQ4_NL,
                          QuantType::kIQ4_XS),
        ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(quant::QuantTypeName(std::get<0>(info.param)), "_",
                          IsaName(std::get<1>(info.param)));
    });

// q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and
// iq4_xs stay on their tiles at any token count where the CPU has them (they
// beat the GEMM); without AVX2 they switch at kMinGemmTokens.
TEST(DefaultMinGemmTokensTest, TilesWhereTheyAreFaster) {
  const bool tiles = IsaSupported(Isa::kAvx2);
  for (QuantType type :
       {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
        QuantType::kQ8_0, QuantType::kQ2_K, QuantType::kQ3_K, QuantType::kQ4_K,
        QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kIQ4_NL,
        QuantType::kIQ4_XS}) {
    EXPECT_EQ(DefaultMinGemmTokens(type),
              tiles ? std::numeric_limits<int64_t>::max() : kMinGemmTokens)
        << quant::QuantTypeName(type);
  }
}

// The builds of the tiles: AVX2's and AVX-512's through QuantMatMul (AVX-512
// hands the types it has no tile for to AVX2's), and the AVX-512 tiles
// emulated on SIMDe (avx512_intrinsics.h), called directly, where the CPU
// has AVX2 (what that build is compiled for).
enum class TileBuild { kAvx2, kAvx512, kAvx512Emulated };

QuantTileFn EmulatedAvx512Tile(QuantType type) {
#ifdef FERRY_TEST_AVX512_EMULATION
  for (QuantTileFn (*table)(QuantType) :
       {emulated::Avx512QuantTile, emulated::Avx512KQuantTile,
        emulated::Avx512Iq4QuantTile}) {
    if (const QuantTileFn tile = table(type); tile != nullptr) return tile;
  }
#endif
  (void)type;
  return nullptr;
}

class TileTest
    : public ::testing::TestWithParam<std::tuple<QuantType, TileBuild>> {};

// The tiles against the scalar vec_dot of each (weight row, token) pair, the
// reference they stand in for: row-major weights (odd row counts, so the
// last group is partial) and grouped ones, at every token count a tile
// split takes (full tiles of 4 and each remainder), one thread. Equal up to
// the order of float sums. The emulated tiles take rows [0, 8) and [8, m)
// in two calls, so a call also starts with one group of 16 rows' partly.
TEST_P(TileTest, MatchesScalarVecDot) {
  const auto [type, build] = GetParam();
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  if (build == TileBuild::kAvx512 && !IsaSupported(Isa::kAvx512)) {
    GTEST_SKIP() << "no AVX-512";
  }
  const QuantTileFn emulated_tile = EmulatedAvx512Tile(type);
  if (build == TileBuild::kAvx512Emulated && emulated_tile == nullptr) {
    GTEST_SKIP() << "no emulated AVX-512 tile for "
                 << quant::QuantTypeName(type)
                 << " (or its build left out: ferry_avx512_emulation=off)";
  }
  const QuantType act_type = *quant::VecDotActivationType(type);
  const quant::VecDotFn dot = quant::FindVecDot(type, Isa::kScalar);
  ASSERT_NE(dot, nullptr);
  std::mt19937 rng(11);
  const int64_t k = 2 * std::max<int64_t>(quant::BlockSize(type), 48);
  for (const int64_t m : {int64_t{37}, int64_t{13}, int64_t{40}}) {
    const bool grouped_too =
        QuantGroupLayout::Packable(*quant::DTypeOf(type), {k, m, 1, 1});
    const std::vector<float> w = Uniform(static_cast<size_t>(m * k), rng);
    const QuantRows a = Quantize(type, w, m, k);
    std::vector<std::byte> grouped(a.bytes.size());
    if (grouped_too) {
      QuantGroupLayout(*quant::DTypeOf(type), {k, m, 1, 1})
          .Pack(a.bytes.data(), 0, a.bytes.size(), grouped.data());
    }
    // 70: past a chunk of 64 tokens (quant_tile_avx2.cc).
    for (const int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 63, 70}) {
      const std::vector<float> b = Uniform(static_cast<size_t>(n * k), rng);
      const QuantRows act = Quantize(act_type, b, n, k);
      QuantMatMulArgs args;
      args.a_type = type;
      args.a_row_bytes = a.row_bytes;
      args.b = b.data();
      args.ldb = k;
      args.ldc = m + 3;
      args.m = m;
      args.n = n;
      args.k = k;
      args.min_gemm_tokens = std::numeric_limits<int64_t>::max();
      for (const bool group : {false, true}) {
        if (group && !grouped_too) continue;
        SCOPED_TRACE(absl::StrCat("m=", m, " n=", n, " grouped=", group));
        args.a_grouped = group;
        args.a = group ? grouped.data() : a.bytes.data();
        std::vector<float> dst;
        if (build == TileBuild::kAvx512Emulated) {
          dst.assign(static_cast<size_t>(n * args.ldc), kSentinel);
          QuantTileArgs tile;
          tile.w = static_cast<const std::byte*>(args.a);
          tile.w_row_bytes = a.row_bytes;
          tile.grouped = group;
          tile.act = act.bytes.data();
          tile.act_row_bytes = act.row_bytes;
          tile.dst = dst.data();
          tile.ldc = args.ldc;
          tile.k = k;
          emulated_tile(tile, 0, std::min<int64_t>(m, kGroupRows), 0, n);
          emulated_tile(tile, std::min<int64_t>(m, kGroupRows), m, 0, n);
        } else {
          dst =
              RunThreads(args, 1, false,
                         build == TileBuild::kAvx2 ? Isa::kAvx2 : Isa::kAvx512);
        }
        int bad = 0;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t i = 0; i < m; ++i) {
            const float want = dot(a.bytes.data() + i * a.row_bytes,
                                   act.bytes.data() + j * act.row_bytes, k);
            double scale = 0;
            for (int64_t l = 0; l < k; ++l) {
              scale += std::fabs(static_cast<double>(a.values[i * k + l]) *
                                 act.values[j * k + l]);
            }
            const float got = dst[static_cast<size_t>(j * args.ldc + i)];
            if (!(std::fabs(got - want) <= 1e-5 * scale + 1e-6) && ++bad <= 3) {
              ADD_FAILURE() << "dst[" << j << "][" << i << "] = " << got
                            << ", vec_dot " << want;
            }
          }
          // The padding past the m rows stays untouched.
          for (int64_t i = m; i < args.ldc; ++i) {
            if (dst[static_cast<size_t>(j * args.ldc + i)] != kSentinel &&
                ++bad <= 3) {
              ADD_FAILURE() << "dst[" << j << "][" << i << "] written";
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

std::string TileTestName(
    const ::testing::TestParamInfo<TileTest::ParamType>& info) {
  constexpr const char* kBuilds[] = {"Avx2", "Avx512", "Avx512Emulated"};
  return absl::StrCat(quant::QuantTypeName(std::get<0>(info.param)), "_",
                      kBuilds[static_cast<int>(std::get<1>(info.param))]);
}

INSTANTIATE_TEST_SUITE_P(
    TiledTypes, TileTest,
    ::testing::Combine(::testing::Values(QuantType::kQ4_0, QuantType::kQ4_1,
                                         QuantType::kQ5_0, QuantType::kQ5_1,
                                         QuantType::kQ8_0, QuantType::kQ2_K,
                                         QuantType::kQ4_K, QuantType::kQ3_K,
                                         QuantType::kQ5_K, QuantType::kQ6_K,
                                         QuantType::kIQ4_NL,
                                         QuantType::kIQ4_XS),
                       ::testing::Values(TileBuild::kAvx2, TileBuild::kAvx512,
                                         TileBuild::kAvx512Emulated)),
    TileTestName);

// A tile reuses what it derived from a thread's activations across the
// calls of one QuantMatMul (the work counter hands out rows a few at a
// time), never across QuantMatMuls: a second product on the same scratch,
// same shapes and new activations equals one on a fresh scratch, bit for
// bit, for every tiled type.
TEST(QuantMatMulTest, NewActivationsOnTheSameScratchAreReadAfresh) {
  for (const Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    for (const QuantType type :
         {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0,
          QuantType::kQ5_1, QuantType::kQ8_0, QuantType::kQ4_K}) {
      SCOPED_TRACE(absl::StrCat(quant::QuantTypeName(type), " ", IsaName(isa)));
      std::mt19937 rng(21);
      const int64_t m = 48, n = 5, k = 256;
      const QuantRows a =
          Quantize(type, Uniform(static_cast<size_t>(m * k), rng), m, k);
      QuantMatMulArgs args;
      args.a_type = type;
      args.a = a.bytes.data();
      args.a_row_bytes = a.row_bytes;
      args.ldb = k;
      args.ldc = m;
      args.m = m;
      args.n = n;
      args.k = k;
      args.min_gemm_tokens = std::numeric_limits<int64_t>::max();
      const size_t bytes =
          QuantMatMulScratchBytes(type, m, n, k, 1, args.min_gemm_tokens);
      // Each product first on a scratch of its own, then both in a row on
      // one scratch.
      std::vector<float> b[2], want[2];
      std::vector<std::byte> fresh[2];
      for (int round = 0; round < 2; ++round) {
        b[round] = Uniform(static_cast<size_t>(n * k), rng);
        want[round].resize(static_cast<size_t>(n * m));
        fresh[round].resize(bytes);
        std::atomic<int64_t> next{0};
        args.next = &next;
        args.b = b[round].data();
        args.dst = want[round].data();
        QuantMatMul(args, 0, 1, fresh[round].data(), isa);
      }
      std::vector<std::byte> shared(bytes);
      for (int round = 0; round < 2; ++round) {
        std::vector<float> got(static_cast<size_t>(n * m));
        std::atomic<int64_t> next{0};
        args.next = &next;
        args.b = b[round].data();
        args.dst = got.data();
        QuantMatMul(args, 0, 1, shared.data(), isa);
        EXPECT_EQ(std::memcmp(got.data(), want[round].data(), got.size() * 4),
                  0)
            << "round " << round;
      }
    }
  }
}

TEST(QuantMatMulSupportsTest, BlockTypesWithKernelsOnly) {
  // Every block dtype of the graph (the CPU kernels admit exactly these).
  for (int i = 0; i < kNumDTypes; ++i) {
    const quant::QuantTypeInfo& info =
        quant::GetQuantTypeInfo(quant::QuantTypeOf(static_cast<DType>(i)));
    if (info.block_size == 1) continue;
    EXPECT_TRUE(QuantMatMulSupports(info.type)) << info.name;
  }
  EXPECT_FALSE(QuantMatMulSupports(QuantType::kF32));
  EXPECT_FALSE(QuantMatMulSupports(QuantType::kIQ2_XXS));
  EXPECT_FALSE(QuantMatMulSupports(QuantType::kQ8_K));
}

}  // namespace
}  // namespace cpu_internal
}  // namespace ferry
