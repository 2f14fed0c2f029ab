#include "ferry/backends/host/internal/mat_mul.h"

#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ferry/backends/host/internal/mat_mul_impl.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/graph/dtype.h"
#include "gtest/gtest.h"

namespace ferry {
namespace cpu_internal {
namespace {

constexpr float kSentinel = -12345.0f;

struct Shape {
  int64_t m;
  int64_t n;
  int64_t k;
};

// Weights in one dtype plus the exact f32 values they hold.
struct Weights {
  std::vector<float> f32;
  std::vector<Half> f16;
  std::vector<BFloat16> bf16;
  std::vector<float> values;

  const void* data(DType type) const {
    switch (type) {
      case DType::kF16:
        return f16.data();
      case DType::kBF16:
        return bf16.data();
      default:
        return f32.data();
    }
  }
};

Weights MakeWeights(DType type, size_t size, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Weights w;
  for (size_t i = 0; i < size; ++i) {
    const float x = dist(rng);
    switch (type) {
      case DType::kF16:
        w.f16.push_back(F32ToF16(x));
        w.values.push_back(F16ToF32(w.f16.back()));
        break;
      case DType::kBF16:
        w.bf16.push_back(F32ToBF16(x));
        w.values.push_back(BF16ToF32(w.bf16.back()));
        break;
      default:
        w.f32.push_back(x);
        w.values.push_back(x);
        break;
    }
  }
  return w;
}

// Packs the m x k matrix `a` (rows lda apart) into panels (packed_layout.h);
// the last panel's padding holds NaN, which must never reach a result.
std::vector<uint8_t> PackA(DType type, const void* a, int64_t m, int64_t k,
                           int64_t lda) {
  const PackedLayout layout(type, {k, m, 1, 1});
  const int64_t es = layout.element_bytes();
  std::vector<uint8_t> packed(layout.PackedBytes());
  const uint16_t nan16 = type == DType::kF16 ? 0x7e00 : 0x7fc0;
  const float nan32 = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < packed.size(); i += es) {
    std::memcpy(&packed[i],
                es == 4 ? static_cast<const void*>(&nan32)
                        : static_cast<const void*>(&nan16),
                es);
  }
  for (int64_t row = 0; row < m; ++row) {
    layout.Pack(static_cast<const uint8_t*>(a) + row * lda * es, row * k * es,
                k * es, packed.data());
  }
  return packed;
}

// How one MatMul run splits and reads its operands.
struct Variant {
  int nth;
  bool shared;  // Claimed column ranges instead of fixed blocks.
  bool packed;  // A in the panel layout.
};

// The builds of the kernels: one per ISA, and the AVX-512 one emulated on
// SIMDe (avx512_intrinsics.h), which runs wherever AVX2 does.
enum class Kernel { kGeneric, kAvx2, kAvx512, kAvx512Emulated };
constexpr const char* kKernelNames[] = {"Generic", "Avx2", "Avx512",
                                        "Avx512Emulated"};

void RunKernel(Kernel kernel, const MatMulArgs& args, int ith, int nth) {
  switch (kernel) {
    case Kernel::kGeneric:
      return MatMulWithIsa(args, ith, nth, Isa::kScalar);
    case Kernel::kAvx2:
      return MatMulWithIsa(args, ith, nth, Isa::kAvx2);
    case Kernel::kAvx512:
      return MatMulWithIsa(args, ith, nth, Isa::kAvx512);
    case Kernel::kAvx512Emulated:
#ifdef FERRY_TEST_AVX512_EMULATION
      return emulated::MatMulAvx512(args, ith, nth);
#else
      break;  // Not built here, and never listed by SupportedKernels.
#endif
  }
  ADD_FAILURE() << "kernel " << kKernelNames[static_cast<int>(kernel)]
                << " not built";
}

// Runs MatMul for each variant on nth (sequential) calls and checks every
// element against a double-precision reference, and that dst's padding is
// untouched.
void CheckMatMul(Kernel kernel, DType type, Shape s, int64_t pad,
                 const std::vector<Variant>& variants) {
  std::mt19937 rng(static_cast<uint32_t>(s.m * 1000003 + s.n * 1009 + s.k));
  const int64_t lda = s.k + pad;
  const int64_t ldb = s.k + 2 * pad;
  const int64_t ldc = s.m + 3 * pad;
  const Weights a = MakeWeights(type, s.m * lda, rng);
  std::vector<float> b(s.n * ldb);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : b) x = dist(rng);
  // Worst-case f32 summation error is about k * eps/2 * sum |a*b|.
  std::vector<double> want(s.n * s.m), tolerance(s.n * s.m);
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t m = 0; m < s.m; ++m) {
      double sum = 0;
      double magnitude = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        const double p = static_cast<double>(a.values[m * lda + k]) *
                         static_cast<double>(b[n * ldb + k]);
        sum += p;
        magnitude += std::fabs(p);
      }
      want[n * s.m + m] = sum;
      tolerance[n * s.m + m] = s.k * FLT_EPSILON * magnitude + 1e-30;
    }
  }
  std::vector<uint8_t> a_packed;
  for (const Variant& v : variants) {
    SCOPED_TRACE(testing::Message()
                 << "kernel=" << kKernelNames[static_cast<int>(kernel)]
                 << " type=" << DTypeName(type) << " m=" << s.m << " n=" << s.n
                 << " k=" << s.k << " nth=" << v.nth << " pad=" << pad
                 << " shared=" << v.shared << " packed=" << v.packed);
    if (v.packed && a_packed.empty()) {
      a_packed = PackA(type, a.data(type), s.m, s.k, lda);
    }
    std::vector<float> dst(s.n * ldc, kSentinel);
    MatMulArgs args;
    args.a_type = type;
    args.a = v.packed ? a_packed.data() : a.data(type);
    args.a_packed = v.packed;
    args.lda = lda;
    args.b = b.data();
    args.ldb = ldb;
    args.dst = dst.data();
    args.ldc = ldc;
    args.m = s.m;
    args.n = s.n;
    args.k = s.k;
    std::atomic<int64_t> next_column{0};
    if (v.shared) args.next_column = &next_column;
    // Reverse order, so a thread relying on another's output would show up.
    for (int ith = v.nth - 1; ith >= 0; --ith) {
      RunKernel(kernel, args, ith, v.nth);
    }
    int failures = 0;
    for (int64_t n = 0; n < s.n; ++n) {
      for (int64_t m = 0; m < ldc; ++m) {
        const float got = dst[n * ldc + m];
        if (m >= s.m) {
          ASSERT_EQ(got, kSentinel) << "wrote padding at n=" << n << " m=" << m;
          continue;
        }
        // Negated so that NaN fails.
        if (!(std::fabs(got - want[n * s.m + m]) <= tolerance[n * s.m + m]) &&
            ++failures <= 5) {
          ADD_FAILURE() << "dst[" << n << "][" << m << "] = " << got
                        << ", want " << want[n * s.m + m];
        }
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

std::vector<Kernel> SupportedKernels() {
  std::vector<Kernel> kernels;
  if (IsaSupported(Isa::kScalar)) kernels.push_back(Kernel::kGeneric);
  if (IsaSupported(Isa::kAvx2)) {
    kernels.push_back(Kernel::kAvx2);
#ifdef FERRY_TEST_AVX512_EMULATION
    kernels.push_back(Kernel::kAvx512Emulated);
#endif
  }
  if (IsaSupported(Isa::kAvx512)) kernels.push_back(Kernel::kAvx512);
  return kernels;
}

class MatMulTest : public testing::TestWithParam<std::tuple<Kernel, DType>> {};

TEST_P(MatMulTest, MatchesReference) {
  const auto [kernel, type] = GetParam();
  const Shape shapes[] = {
      {1, 1, 1},     {7, 1, 33},    {33, 7, 1},    {1, 5, 17},
      {16, 2, 16},   {17, 3, 100},  {65, 4, 31},   {64, 6, 256},
      {65, 13, 300}, {130, 9, 257}, {300, 70, 40}, {200, 31, 513},
      {4096, 1, 64}, {33, 1, 4097}, {17, 2100, 5}, {129, 8, 7},
  };
  std::vector<Variant> variants;
  for (int nth : {1, 2, 3, 16}) {
    for (bool shared : {false, true}) {
      for (bool packed : {false, true}) {
        variants.push_back(Variant{nth, shared, packed});
      }
    }
  }
  for (const Shape& s : shapes) {
    for (int64_t pad : {0, 3}) CheckMatMul(kernel, type, s, pad, variants);
  }
}

TEST_P(MatMulTest, PackedMatchesReferenceOnModelShapes) {
  // The weight shapes of the 2-layer llama forward (n_embd 2048, n_ff 5632)
  // at 1, 8 and 32 tokens, with n below and above one tile of rows, K above
  // the K block (so blocks accumulate), n above the B block, and threads
  // splitting the columns or both dimensions.
  const auto [kernel, type] = GetParam();
  // The emulated kernel's logic is MatchesReference's to check; here the
  // double reference would take seconds more per sanitizer run.
  if (kernel == Kernel::kAvx512Emulated) {
    GTEST_SKIP() << "model shapes: native kernels only";
  }
  const Shape shapes[] = {
      {5632, 1, 2048}, {2048, 8, 5632}, {704, 32, 2048},
      {576, 13, 300},  {128, 1100, 70}, {320, 512, 96},
  };
  for (const Shape& s : shapes) {
    CheckMatMul(kernel, type, s, /*pad=*/0,
                {{1, false, true}, {2, false, true}, {5, true, true}});
  }
}

std::string ParamName(
    const testing::TestParamInfo<MatMulTest::ParamType>& info) {
  return std::string(kKernelNames[static_cast<int>(std::get<0>(info.param))]) +
         "_" + std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    AllIsasAndTypes, MatMulTest,
    testing::Combine(testing::ValuesIn(SupportedKernels()),
                     testing::Values(DType::kF32, DType::kF16, DType::kBF16)),
    ParamName);

TEST(MatMulTest, ParallelAndDispatchMatchReference) {
  // MatMulParallel uses the best ISA and real threads; check the GEMM and dot
  // paths, with fixed blocks and with claimed ranges.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t m = 300, k = 600;
  std::atomic<int64_t> next_column{123};  // MatMulParallel resets it.
  for (int64_t n : {50, 3}) {
    for (std::atomic<int64_t>* counter :
         {static_cast<std::atomic<int64_t>*>(nullptr), &next_column}) {
      std::vector<float> a(m * k), b(n * k), dst(n * m, kSentinel);
      for (float& x : a) x = dist(rng);
      for (float& x : b) x = dist(rng);
      MatMulArgs args;
      args.a = a.data();
      args.lda = k;
      args.b = b.data();
      args.ldb = k;
      args.dst = dst.data();
      args.ldc = m;
      args.m = m;
      args.n = n;
      args.k = k;
      args.next_column = counter;
      MatMulParallel(args, 2);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) {
          double want = 0;
          for (int64_t l = 0; l < k; ++l) {
            want += static_cast<double>(a[j * k + l]) * b[i * k + l];
          }
          ASSERT_NEAR(dst[i * m + j], want, 1e-3)
              << "n=" << n << " shared=" << (counter != nullptr) << " at " << i
              << " " << j;
        }
      }
    }
  }
}

TEST(ClaimColumnsTest, ClaimsDisjointAlignedRangesUntilDone) {
  for (int64_t m : {1, 63, 64, 1000, 4096}) {
    std::atomic<int64_t> next{0};
    int64_t expected_begin = 0;
    int claims = 0;
    for (Range r = ClaimColumns(next, m, 64, 2, 2); r.size() > 0;
         r = ClaimColumns(next, m, 64, 2, 2)) {
      EXPECT_EQ(r.begin, expected_begin);
      EXPECT_EQ(r.begin % 64, 0);
      expected_begin = r.end;
      ++claims;
    }
    EXPECT_EQ(expected_begin, m);
    EXPECT_LE(claims, 16);  // Guided sizes: few claims even for large m.
  }
}

TEST(PartitionOutputTest, BlocksTileTheOutputExactly) {
  for (int64_t m : {1, 7, 64, 65, 512, 4096}) {
    for (int64_t n : {1, 5, 6, 7, 100, 1024}) {
      for (int nth = 1; nth <= 16; ++nth) {
        std::vector<int> covered(m * n, 0);
        for (int ith = 0; ith < nth; ++ith) {
          const OutputBlock b = PartitionOutput(m, n, 64, 6, ith, nth);
          ASSERT_LE(b.m.begin, b.m.end);
          ASSERT_LE(b.n.begin, b.n.end);
          ASSERT_LE(b.m.end, m);
          ASSERT_LE(b.n.end, n);
          if (b.m.size() == 0) continue;
          for (int64_t i = b.n.begin; i < b.n.end; ++i) {
            for (int64_t j = b.m.begin; j < b.m.end; ++j) ++covered[i * m + j];
          }
        }
        for (int c : covered) ASSERT_EQ(c, 1) << m << " " << n << " " << nth;
      }
    }
  }
}

TEST(PartitionOutputTest, BalancesSquareOutputs) {
  // No block is much larger than an even share.
  for (int64_t size : {512, 1024, 4096}) {
    for (int nth : {2, 3, 4, 8, 16}) {
      for (int ith = 0; ith < nth; ++ith) {
        const OutputBlock b = PartitionOutput(size, size, 64, 6, ith, nth);
        EXPECT_LE(b.m.size() * b.n.size() * nth, 1.15 * size * size)
            << size << " " << nth << " " << ith;
      }
    }
  }
}

TEST(PartitionRangeTest, CoversAlignedParts) {
  for (int64_t size : {1, 15, 16, 17, 4096}) {
    for (int nth = 1; nth <= 16; ++nth) {
      int64_t next = 0;
      for (int ith = 0; ith < nth; ++ith) {
        const Range r = PartitionRange(size, 16, ith, nth);
        EXPECT_EQ(r.begin, next);
        EXPECT_EQ(r.begin % 16, 0);
        next = r.end;
      }
      EXPECT_EQ(next, size);
    }
  }
}

}  // namespace
}  // namespace cpu_internal
}  // namespace ferry
