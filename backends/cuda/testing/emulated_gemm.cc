#include "ferry/backends/cuda/testing/emulated_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/graph/dtype.h"

namespace ferry::cuda_testing {
namespace {

int64_t ElementBytes(GemmType type) { return type == GemmType::kF32 ? 4 : 2; }

// x with its mantissa rounded (to nearest even) to TF32's 10 bits.
float RoundToTf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // Inf, NaN.
  bits += 0xfffu + ((bits >> 13) & 1u);
  bits &= ~0x1fffu;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

float Load(GemmType type, const std::byte* p) {
  switch (type) {
    case GemmType::kF16: {
      Half h;
      std::memcpy(&h, p, sizeof(h));
      return F16ToF32(h);
    }
    case GemmType::kBF16: {
      BFloat16 b;
      std::memcpy(&b, p, sizeof(b));
      return BF16ToF32(b);
    }
    default: {
      float f;
      std::memcpy(&f, p, sizeof(f));
      return f;
    }
  }
}

// Bytes of a column-major rows x cols matrix with leading dimension ld,
// repeated `batch` times `stride` elements apart.
size_t Extent(int64_t rows, int64_t cols, int64_t ld, int64_t stride,
              int64_t batch, int64_t element_bytes) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  const int64_t last =
      (cols - 1) * ld + (rows - 1) + (batch - 1) * stride;  // Elements.
  return static_cast<size_t>((last + 1) * element_bytes);
}

}  // namespace

absl::Status CheckGemm(const GemmCall& call) {
  const int64_t a_rows = call.trans_a ? call.k : call.m;
  const int64_t b_rows = call.trans_b ? call.n : call.k;
  if (call.m < 0 || call.n < 0 || call.k < 0 || call.batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("emulated cuBLAS: negative size m=", call.m, " n=", call.n,
                     " k=", call.k, " batch=", call.batch));
  }
  if (call.lda < std::max<int64_t>(1, a_rows) ||
      call.ldb < std::max<int64_t>(1, b_rows) ||
      call.ldc < std::max<int64_t>(1, call.m)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated cuBLAS: leading dimension below its minimum: lda=", call.lda,
        " (>= ", std::max<int64_t>(1, a_rows), "), ldb=", call.ldb,
        " (>= ", std::max<int64_t>(1, b_rows), "), ldc=", call.ldc,
        " (>= ", std::max<int64_t>(1, call.m), ")"));
  }
  if (call.stride_a < 0 || call.stride_b < 0 || call.stride_c < 0) {
    return absl::InvalidArgumentError("emulated cuBLAS: negative stride");
  }
  return absl::OkStatus();
}

size_t ExtentA(const GemmCall& call) {
  return Extent(call.trans_a ? call.k : call.m, call.trans_a ? call.m : call.k,
                call.lda, call.stride_a, call.batch,
                ElementBytes(call.ab_type));
}

size_t ExtentB(const GemmCall& call) {
  return Extent(call.trans_b ? call.n : call.k, call.trans_b ? call.k : call.n,
                call.ldb, call.stride_b, call.batch,
                ElementBytes(call.ab_type));
}

size_t ExtentC(const GemmCall& call) {
  return Extent(call.m, call.n, call.ldc, call.stride_c, call.batch,
                sizeof(float));
}

void RunGemm(const GemmCall& call) {
  const int64_t size = ElementBytes(call.ab_type);
  const auto* a0 = static_cast<const std::byte*>(call.a);
  const auto* b0 = static_cast<const std::byte*>(call.b);
  for (int64_t s = 0; s < call.batch; ++s) {
    const std::byte* a = a0 + s * call.stride_a * size;
    const std::byte* b = b0 + s * call.stride_b * size;
    float* c = call.c + s * call.stride_c;
    for (int64_t j = 0; j < call.n; ++j) {
      for (int64_t i = 0; i < call.m; ++i) {
        float sum = 0.0f;
        for (int64_t p = 0; p < call.k; ++p) {
          const int64_t ai = call.trans_a ? p + i * call.lda : i + p * call.lda;
          const int64_t bi = call.trans_b ? j + p * call.ldb : p + j * call.ldb;
          float x = Load(call.ab_type, a + ai * size);
          float y = Load(call.ab_type, b + bi * size);
          if (call.tf32) {
            x = RoundToTf32(x);
            y = RoundToTf32(y);
          }
          sum += x * y;
        }
        float& out = c[i + j * call.ldc];
        out = call.beta == 0.0f ? call.alpha * sum
                                : call.alpha * sum + call.beta * out;
      }
    }
  }
}

}  // namespace ferry::cuda_testing
