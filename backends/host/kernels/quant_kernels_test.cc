// The CPU kernels on block-quantized tensors: mul_mat with a quantized
// weight and get_rows from a quantized table against the reference
// evaluator (which computes on the dequantized values), and the refusal of
// every other op that would read or write a block type.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/internal/quant_mat_mul.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/runtime/sanitizer_build.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::cpu_kernels {
namespace {

using ::ferry::testing::EvaluateReference;
using ::ferry::testing::FillRandom;
using ::ferry::testing::Nmse;
using ::ferry::testing::ReadTensor;
using ::ferry::testing::StatusIs;
using ::ferry::testing::WriteTensor;

constexpr DType kQuantTypes[] = {DType::kQ4_0, DType::kQ4_1,   DType::kQ5_0,
                                 DType::kQ5_1, DType::kQ8_0,   DType::kQ2_K,
                                 DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,
                                 DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// A row length of a few blocks that no SIMD width divides evenly: 5 blocks
// of 32, or 3 super-blocks of 256.
int64_t RowLength(DType type) {
  return DTypeBlockSize(type) == 256 ? 768 : 160;
}

// Runs `out`'s graph with the kernels on 1 and 2 threads (results poisoned
// first; under a sanitizer, 2 only) and with the reference, and expects
// NMSE <= tolerance.
void ExpectMatchesReference(Tensor* out, double tolerance) {
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  FERRY_ASSERT_OK(EvaluateReference(graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> want, ReadTensor(*out));
  for (int nth : {1, 2}) {
    if (kSanitizerBuild && nth == 1) continue;
    SCOPED_TRACE(absl::StrCat("nth=", nth));
    FERRY_ASSERT_OK(WriteTensor(
        *out,
        std::vector<float>(static_cast<size_t>(out->NumElements()), -777.0f)));
    KernelRunner runner(nth);
    FERRY_ASSERT_OK(runner.Run(graph.nodes()));
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
    EXPECT_LE(Nmse(want, got), tolerance);  // Fails on NaN too.
  }
}

// mul_mat with a quantized weight, for decode (1 token), short batches
// (vec_dot or tiles on 8-bit activations: NMSE of their rounding, ~1e-5)
// and prompts (the dequantized GEMM's exact f32 products, except for types
// whose tiles serve every token count), as one weight product (whose
// threads quantize the activations once, between them, for short batches)
// and with a broadcast batch dim; k = RowLength(type).
TEST(QuantKernelsTest, MulMatMatchesReference) {
  for (DType type : kQuantTypes) {
    for (int64_t n : {1, 5, 40, 100}) {
      for (int64_t batch : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(DTypeName(type), " n=", n, " batch=", batch));
        Context ctx;
        const int64_t k = RowLength(type);
        FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, ctx.NewTensor(type, {k, 70}));
        FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b,
                                   ctx.NewTensor(DType::kF32, {k, n, batch}));
        FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, MulMat(ctx, a, b));
        FERRY_ASSERT_OK(ctx.AllocateHostData());
        FERRY_ASSERT_OK(FillRandom(*a, 1));
        FERRY_ASSERT_OK(FillRandom(*b, 2));
        EXPECT_GT(ScratchBytes(*out, 2), 0u);
        const bool gemm =
            n >= cpu_internal::DefaultMinGemmTokens(quant::QuantTypeOf(type));
        ExpectMatchesReference(out, gemm ? 1e-10 : 1e-4);
      }
    }
  }
}

// get_rows dequantizes exactly what the reference does.
TEST(QuantKernelsTest, GetRowsMatchesReference) {
  for (DType type : kQuantTypes) {
    SCOPED_TRACE(DTypeName(type));
    Context ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(
        Tensor * table,
        ctx.NewTensor(type, {DTypeBlockSize(type) == 256 ? 512 : 96, 50}));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * ids, ctx.NewTensor(DType::kI32, {7}));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, GetRows(ctx, table, ids));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*table, 3));
    FERRY_ASSERT_OK(WriteTensor(*ids, {0, 49, 7, 7, 31, 1, 20}));
    ExpectMatchesReference(out, 0);
  }
}

// Block types only as mul_mat's and get_rows' a: the kernels refuse a
// quantized tensor anywhere else, even where graph construction cannot
// stop it (a node assembled by hand).
TEST(QuantKernelsTest, OtherUsesAreRefused) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * q, ctx.NewTensor(DType::kQ4_1, {64, 4}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * f, ctx.NewTensor(DType::kF32, {64, 4}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * sum, Add(ctx, f, f));
  sum->src[1] = q;
  EXPECT_THAT(CheckSupported(*sum), StatusIs(absl::StatusCode::kUnimplemented));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * product, MulMat(ctx, f, f));
  product->src[1] = q;  // b must stay f32.
  EXPECT_THAT(CheckSupported(*product),
              StatusIs(absl::StatusCode::kUnimplemented));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * copy, Cont(ctx, f));
  copy->src[0] = q;
  copy->dtype = DType::kQ4_1;
  EXPECT_THAT(CheckSupported(*copy),
              StatusIs(absl::StatusCode::kUnimplemented));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * good, MulMat(ctx, q, f));
  FERRY_EXPECT_OK(CheckSupported(*good));
}

}  // namespace
}  // namespace ferry::cpu_kernels
