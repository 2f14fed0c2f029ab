#include "ferry/backends/cuda/kernels/internal/kernel_test_cases.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/graph/testing/in_place_ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace cuda_kernels_internal {
namespace {

using ::ferry::testing::EvaluateReference;
using ::ferry::testing::FillRandom;
using ::ferry::testing::Nmse;
using ::ferry::testing::ReadTensor;
using ::ferry::testing::WriteTensor;
using Shape = std::array<int64_t, 4>;

// Tolerances (NMSE), as the CPU kernels' tests.
constexpr double kTolF32 = 1e-10;  // Element-wise and row-wise f32.
constexpr double kTolMatMulF32 = 1e-6;
constexpr double kTolMatMulF16 = 1e-5;
// bf16 weights: b is rounded to bf16 too (8 significant bits) before the
// tensor-core GEMM, an NMSE of about 3e-6 on average and more for tiny k.
constexpr double kTolMatMulBF16 = 1e-4;

constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t Rand(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A tensor of shape ne with contiguous rows laid out by `kind`:
// 0 contiguous, 1 a view of a larger leaf with padded rows and an offset,
// 2 a permute of dims 1 and 2, 3 a permute of dims 2 and 3. *leaf gets the
// tensor to fill.
absl::StatusOr<Tensor*> Strided(Context& ctx, DType dtype, Shape ne, int kind,
                                Tensor** leaf) {
  switch (kind % 4) {
    case 0: {
      FERRY_ASSIGN_OR_RETURN(
          Tensor * t, ctx.NewTensor(dtype, {ne[0], ne[1], ne[2], ne[3]}));
      *leaf = t;
      return t;
    }
    case 1: {
      FERRY_ASSIGN_OR_RETURN(
          Tensor * base,
          ctx.NewTensor(dtype, {ne[0] + 3, ne[1], ne[2], ne[3] + 1}));
      *leaf = base;
      return View4D(ctx, base, ne[0], ne[1], ne[2], ne[3], base->nb[1],
                    base->nb[2], base->nb[3],
                    2 * base->ElementSize() + base->nb[3]);
    }
    case 2: {
      FERRY_ASSIGN_OR_RETURN(
          Tensor * base, ctx.NewTensor(dtype, {ne[0], ne[2], ne[1], ne[3]}));
      *leaf = base;
      return Permute(ctx, base, 0, 2, 1, 3);
    }
    default: {
      FERRY_ASSIGN_OR_RETURN(
          Tensor * base, ctx.NewTensor(dtype, {ne[0], ne[1], ne[3], ne[2]}));
      *leaf = base;
      return Permute(ctx, base, 0, 1, 3, 2);
    }
  }
}

using BinaryBuild = absl::StatusOr<Tensor*> (*)(Context&, Tensor*, Tensor*);
using UnaryBuild = absl::StatusOr<Tensor*> (*)(Context&, Tensor*);

const std::pair<const char*, BinaryBuild> kBinaryOps[] = {
    {"add", &Add}, {"sub", &Sub}, {"mul", &Mul}, {"div", &Div}};

const std::pair<const char*, UnaryBuild> kUnaryOps[] = {
    {"scale", [](Context& c, Tensor* a) { return Scale(c, a, -0.37f); }},
    {"silu", &Silu},
    {"gelu", &Gelu},
    {"relu", &Relu},
    {"tanh", &Tanh},
    {"rms_norm", [](Context& c, Tensor* a) { return RmsNorm(c, a, 1e-5f); }},
    {"norm", [](Context& c, Tensor* a) { return Norm(c, a, 1e-5f); }},
};

void AddMulMatCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const double tol = dtype == DType::kF32   ? kTolMatMulF32
                       : dtype == DType::kF16 ? kTolMatMulF16
                                              : kTolMatMulBF16;
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t k = trial == 4 ? 1100 : Rand(rng, 1, 70);
      const int64_t m = trial == 4 ? 6 : Rand(rng, 1, 40);
      const int64_t n = trial == 4 ? 5 : Rand(rng, 1, 17);
      const int64_t a2 = Rand(rng, 1, 2), a3 = Rand(rng, 1, 2);
      const int64_t b2 = a2 * Rand(rng, 1, 3), b3 = a3 * Rand(rng, 1, 2);
      cases.push_back(
          {absl::StrCat("mul_mat/", DTypeName(dtype), "/", trial), tol,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             Tensor *a_leaf, *b_leaf;
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a,
                 Strided(ctx, dtype, {k, m, a2, a3}, trial, &a_leaf));
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * b,
                 Strided(ctx, DType::kF32, {k, n, b2, b3}, trial + 1, &b_leaf));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, a, b));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a_leaf, 10 + trial));
             FERRY_RETURN_IF_ERROR(FillRandom(*b_leaf, 20 + trial));
             return out;
           }});
    }
  }
  // Fixed shapes: vectors, GQA-style broadcast over dims 2 and 3 (batches
  // that split into several strided runs), large slices.
  struct Fixed {
    const char* name;
    Shape a, b;
  };
  const Fixed fixed[] = {
      {"gemv", {33, 7, 1, 1}, {33, 1, 1, 1}},
      {"row_times_matrix", {33, 1, 1, 1}, {33, 9, 1, 1}},
      {"gqa", {32, 8, 2, 1}, {32, 5, 6, 1}},
      {"gqa_dim3", {16, 4, 2, 2}, {16, 3, 4, 6}},
      {"batched", {24, 5, 3, 2}, {24, 4, 3, 2}},
      {"large", {160, 200, 1, 1}, {160, 140, 3, 1}},
  };
  for (const Fixed& f : fixed) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const double tol = dtype == DType::kF32   ? kTolMatMulF32
                         : dtype == DType::kF16 ? kTolMatMulF16
                                                : kTolMatMulBF16;
      const Shape an = f.a, bn = f.b;
      cases.push_back(
          {absl::StrCat("mul_mat/", f.name, "/", DTypeName(dtype)), tol,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a,
                 ctx.NewTensor(dtype, {an[0], an[1], an[2], an[3]}));
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * b,
                 ctx.NewTensor(DType::kF32, {bn[0], bn[1], bn[2], bn[3]}));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, a, b));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a, 1));
             FERRY_RETURN_IF_ERROR(FillRandom(*b, 2));
             return out;
           }});
    }
  }
  // Attention-style: q and k permuted so heads are dim 2 (non-contiguous
  // batches of both operands).
  cases.push_back(
      {"mul_mat/attention_permuted", kTolMatMulF32,
       [](Context& ctx) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * q,
                                ctx.NewTensor(DType::kF32, {16, 3, 7}));
         FERRY_ASSIGN_OR_RETURN(Tensor * k,
                                ctx.NewTensor(DType::kF32, {16, 3, 9}));
         FERRY_ASSIGN_OR_RETURN(Tensor * qp, Permute(ctx, q, 0, 2, 1, 3));
         FERRY_ASSIGN_OR_RETURN(Tensor * kp, Permute(ctx, k, 0, 2, 1, 3));
         FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, kp, qp));
         FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
         FERRY_RETURN_IF_ERROR(FillRandom(*q, 3));
         FERRY_RETURN_IF_ERROR(FillRandom(*k, 4));
         return out;
       }});
  // Row strides below k: rows overlap or repeat (stride 0), for a and b.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t a_stride : {0, 3}) {
      cases.push_back(
          {absl::StrCat("mul_mat/overlapping_rows/", DTypeName(dtype), "/",
                        a_stride),
           dtype == DType::kF32 ? kTolMatMulF32 : kTolMatMulBF16,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             FERRY_ASSIGN_OR_RETURN(Tensor * a_leaf,
                                    ctx.NewTensor(dtype, {64}));
             FERRY_ASSIGN_OR_RETURN(Tensor * b_leaf,
                                    ctx.NewTensor(DType::kF32, {128}));
             const int64_t es = a_leaf->ElementSize();
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a, View2D(ctx, a_leaf, 20, 5, a_stride * es, 0));
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * b, View3D(ctx, b_leaf, 20, 4, 3, 2 * 4, 30 * 4, 4));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, a, b));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a_leaf, 3));
             FERRY_RETURN_IF_ERROR(FillRandom(*b_leaf, 4));
             return out;
           }});
    }
  }
  // K = 0: every sum is empty, so the result is all zeros.
  cases.push_back(
      {"mul_mat/empty_k", 0.0, [](Context& ctx) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                ctx.NewTensor(DType::kF32, {0, 5, 2}));
         FERRY_ASSIGN_OR_RETURN(Tensor * b,
                                ctx.NewTensor(DType::kF32, {0, 3, 4}));
         FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, a, b));
         FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
         return out;
       }});
}

void AddElementWiseCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(2);
  for (const auto& [name, build] : kBinaryOps) {
    for (int trial = 0; trial < 8; ++trial) {
      Shape ne = {Rand(rng, 1, 300), Rand(rng, 1, 6), Rand(rng, 1, 3),
                  Rand(rng, 1, 2)};
      if (trial == 5) ne = {1000, 1, 1, 1};
      Shape bne = ne;
      for (int i = 0; i < 4; ++i) {
        const int pick = static_cast<int>(Rand(rng, 0, 2));
        if (pick == 0) bne[i] = 1;
        if (pick == 1 && ne[i] % 2 == 0) bne[i] = ne[i] / 2;
      }
      const BinaryBuild fn = build;
      cases.push_back(
          {absl::StrCat(name, "/", trial), kTolF32,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             Tensor *a_leaf, *b_leaf;
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a, Strided(ctx, DType::kF32, ne, trial, &a_leaf));
             FERRY_ASSIGN_OR_RETURN(Tensor * b, Strided(ctx, DType::kF32, bne,
                                                        trial + 2, &b_leaf));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, fn(ctx, a, b));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a_leaf, 30 + trial));
             FERRY_RETURN_IF_ERROR(FillRandom(*b_leaf, 40 + trial, 0.5f, 2.0f));
             return out;
           }});
    }
  }
  std::mt19937 rng3(3);
  for (const auto& [name, build] : kUnaryOps) {
    for (int trial = 0; trial < 6; ++trial) {
      Shape ne = {Rand(rng3, 1, 300), Rand(rng3, 1, 6), Rand(rng3, 1, 3),
                  Rand(rng3, 1, 2)};
      if (trial == 4) ne = {2000, 1, 1, 1};
      if (trial == 5) ne = {1, 7, 2, 1};  // One-element rows.
      const UnaryBuild fn = build;
      cases.push_back({absl::StrCat(name, "/", trial), kTolF32,
                       [=](Context& ctx) -> absl::StatusOr<Tensor*> {
                         Tensor* leaf;
                         FERRY_ASSIGN_OR_RETURN(
                             Tensor * a,
                             Strided(ctx, DType::kF32, ne, trial, &leaf));
                         FERRY_ASSIGN_OR_RETURN(Tensor * out, fn(ctx, a));
                         FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
                         // Wide range: exp's limits in silu and gelu.
                         FERRY_RETURN_IF_ERROR(
                             FillRandom(*leaf, 50 + trial, -12.0f, 12.0f));
                         return out;
                       }});
    }
  }
  for (UnaryBuild fn : {UnaryBuild{&Silu}, UnaryBuild{&Gelu}}) {
    cases.push_back(
        {fn == UnaryBuild{&Silu} ? "silu/extremes" : "gelu/extremes", kTolF32,
         [=](Context& ctx) -> absl::StatusOr<Tensor*> {
           FERRY_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(DType::kF32, {24}));
           FERRY_ASSIGN_OR_RETURN(Tensor * out, fn(ctx, a));
           FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
           FERRY_RETURN_IF_ERROR(WriteTensor(
               *a, {-200,  -100,   -88,  -87.5, -50,   -20, -5,  -1,
                    -1e-3, -1e-30, 0,    1e-30, 1e-3,  1,   5,   20,
                    44,    50,     87.5, 88,    88.7f, 89,  100, 200}));
           return out;
         }});
  }
}

void AddSoftMaxCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 10; ++trial) {
    Shape ne = {Rand(rng, 1, 200), Rand(rng, 1, 7), Rand(rng, 1, 4),
                Rand(rng, 1, 2)};
    if (trial == 8) ne = {3000, 2, 1, 1};  // Rows longer than a block.
    const bool with_mask = trial % 4 != 0;
    const int64_t m2 = ne[2] % 2 == 0 && trial % 2 ? 2 : 1;
    const int64_t m3 = ne[3] == 2 && trial == 9 ? 2 : 1;
    cases.push_back(
        {absl::StrCat("soft_max/", trial), kTolF32,
         [=](Context& ctx) -> absl::StatusOr<Tensor*> {
           Tensor* leaf;
           FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                  Strided(ctx, DType::kF32, ne, trial, &leaf));
           Tensor* mask = nullptr;
           if (with_mask) {
             FERRY_ASSIGN_OR_RETURN(
                 mask, ctx.NewTensor(DType::kF32,
                                     {ne[0], ne[1] + trial % 3, m2, m3}));
           }
           FERRY_ASSIGN_OR_RETURN(
               Tensor * out, SoftMax(ctx, a, mask, trial == 3 ? 1.0f : 0.125f));
           FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
           FERRY_RETURN_IF_ERROR(FillRandom(*leaf, 60 + trial, -8.0f, 8.0f));
           if (mask != nullptr) {
             // Causal-like: -inf right of the diagonal (column 0 kept).
             std::vector<float> values;
             for (int64_t i3 = 0; i3 < mask->ne[3]; ++i3) {
               for (int64_t i2 = 0; i2 < mask->ne[2]; ++i2) {
                 for (int64_t i1 = 0; i1 < mask->ne[1]; ++i1) {
                   for (int64_t i0 = 0; i0 < mask->ne[0]; ++i0) {
                     values.push_back(
                         i0 > i1 + 3 + i2 + i3
                             ? -kInf
                             : 0.1f * static_cast<float>((i0 * 7 + i1) % 5));
                   }
                 }
               }
             }
             FERRY_RETURN_IF_ERROR(WriteTensor(*mask, values));
           }
           return out;
         }});
  }
  KernelCase masked;
  masked.name = "soft_max/fully_masked_row_is_nan";
  masked.build = [](Context& ctx) -> absl::StatusOr<Tensor*> {
    FERRY_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(DType::kF32, {5, 2}));
    FERRY_ASSIGN_OR_RETURN(Tensor * mask, ctx.NewTensor(DType::kF32, {5, 2}));
    FERRY_ASSIGN_OR_RETURN(Tensor * out, SoftMax(ctx, a, mask, 1.0f));
    FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
    FERRY_RETURN_IF_ERROR(FillRandom(*a, 1));
    FERRY_RETURN_IF_ERROR(WriteTensor(
        *mask, {-kInf, -kInf, -kInf, -kInf, -kInf, 0, 0, 0, -kInf, 0}));
    return out;
  };
  masked.check = [](const std::vector<float>& got) {
    ASSERT_EQ(got.size(), 10u);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
    EXPECT_EQ(got[8], 0.0f);
    EXPECT_NEAR(got[5] + got[6] + got[7] + got[9], 1.0f, 1e-6f);
  };
  cases.push_back(masked);
}

void AddRopeCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t head_dim = trial == 9 ? 1024 : 2 * Rand(rng, 1, 40);
    const int64_t n_dims =
        trial % 3 == 0 ? head_dim : 2 * Rand(rng, 1, head_dim / 2);
    const Shape ne = {head_dim, Rand(rng, 1, 5), Rand(rng, 1, 6),
                      Rand(rng, 1, 2)};
    const RopeMode mode = trial % 2 ? RopeMode::kNeox : RopeMode::kNormal;
    const float base = trial % 4 < 2 ? 10000.0f : 500000.0f;
    const float freq_scale = trial % 4 == 3 ? 0.25f : 1.0f;
    cases.push_back(
        {absl::StrCat("rope/", trial), kTolF32,
         [=](Context& ctx) -> absl::StatusOr<Tensor*> {
           Tensor* leaf;
           FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                  Strided(ctx, DType::kF32, ne, trial, &leaf));
           FERRY_ASSIGN_OR_RETURN(Tensor * pos,
                                  ctx.NewTensor(DType::kI32, {ne[2]}));
           FERRY_ASSIGN_OR_RETURN(
               Tensor * out, Rope(ctx, a, pos, static_cast<int>(n_dims), mode,
                                  base, freq_scale));
           FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
           FERRY_RETURN_IF_ERROR(FillRandom(*leaf, 70 + trial));
           FERRY_RETURN_IF_ERROR(FillRandom(*pos, 80 + trial, 0.0f, 4096.0f));
           return out;
         }});
  }
}

// set_rows writes N distinct rows of a cache and leaves the others: the
// output is the whole cache, so a stray write anywhere shows.
void AddSetRowsCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(7);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t e = Rand(rng, 1, 100);
      const int64_t r = Rand(rng, 1, 24);
      const int64_t n = Rand(rng, 1, static_cast<int>(r));
      std::vector<float> ids(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) ids[i] = static_cast<float>(i);
      std::shuffle(ids.begin(), ids.end(), rng);
      ids.resize(static_cast<size_t>(n));
      cases.push_back(
          {absl::StrCat("set_rows/", DTypeName(dtype), "/", trial), 0.0,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             FERRY_ASSIGN_OR_RETURN(Tensor * cache,
                                    ctx.NewTensor(dtype, {e, r}));
             FERRY_ASSIGN_OR_RETURN(Tensor * rows,
                                    ctx.NewTensor(DType::kF32, {e, n}));
             FERRY_ASSIGN_OR_RETURN(Tensor * id_tensor,
                                    ctx.NewTensor(DType::kI32, {n}));
             FERRY_ASSIGN_OR_RETURN(Tensor * out,
                                    SetRows(ctx, cache, rows, id_tensor));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*cache, 100 + trial));
             FERRY_RETURN_IF_ERROR(FillRandom(*rows, 105 + trial));
             FERRY_RETURN_IF_ERROR(WriteTensor(*id_tensor, ids));
             return out;
           }});
    }
  }
  // Ids outside [0, R) are skipped, as on the CPU (the reference refuses
  // them).
  KernelCase out_of_range;
  out_of_range.name = "set_rows/out_of_range_skipped";
  out_of_range.build = [](Context& ctx) -> absl::StatusOr<Tensor*> {
    FERRY_ASSIGN_OR_RETURN(Tensor * cache, ctx.NewTensor(DType::kF16, {2, 3}));
    FERRY_ASSIGN_OR_RETURN(Tensor * rows, ctx.NewTensor(DType::kF32, {2, 3}));
    FERRY_ASSIGN_OR_RETURN(Tensor * ids, ctx.NewTensor(DType::kI32, {3}));
    FERRY_ASSIGN_OR_RETURN(Tensor * out, SetRows(ctx, cache, rows, ids));
    FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
    FERRY_RETURN_IF_ERROR(WriteTensor(*cache, {0, 1, 10, 11, 20, 21}));
    FERRY_RETURN_IF_ERROR(WriteTensor(*rows, {-1, -2, 5, 6, -3, -4}));
    FERRY_RETURN_IF_ERROR(WriteTensor(*ids, {-1, 2, 3}));
    return out;
  };
  out_of_range.check = [](const std::vector<float>& got) {
    EXPECT_EQ(got, (std::vector<float>{0, 1, 10, 11, 5, 6}));
  };
  cases.push_back(out_of_range);
}

void AddGetRowsCases(std::vector<KernelCase>& cases) {
  std::mt19937 rng(6);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int trial = 0; trial < 5; ++trial) {
      const Shape ne = {Rand(rng, 1, 100), Rand(rng, 1, 20), Rand(rng, 1, 3),
                        Rand(rng, 1, 2)};
      const int64_t n = Rand(rng, 1, 12);
      cases.push_back(
          {absl::StrCat("get_rows/", DTypeName(dtype), "/", trial), 0.0,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             Tensor* leaf;
             FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                    Strided(ctx, dtype, ne, trial, &leaf));
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * ids, ctx.NewTensor(DType::kI32, {n, ne[2], ne[3]}));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, GetRows(ctx, a, ids));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*leaf, 90 + trial));
             FERRY_RETURN_IF_ERROR(
                 FillRandom(*ids, 95 + trial, 0.0f, static_cast<float>(ne[1])));
             return out;
           }});
    }
  }
  // Ids outside [0, R) give a row of NaN (the reference refuses them).
  KernelCase out_of_range;
  out_of_range.name = "get_rows/out_of_range_gives_nan";
  out_of_range.build = [](Context& ctx) -> absl::StatusOr<Tensor*> {
    FERRY_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(DType::kF16, {4, 3}));
    FERRY_ASSIGN_OR_RETURN(Tensor * ids, ctx.NewTensor(DType::kI32, {4}));
    FERRY_ASSIGN_OR_RETURN(Tensor * out, GetRows(ctx, a, ids));
    FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
    FERRY_RETURN_IF_ERROR(
        WriteTensor(*a, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}));
    FERRY_RETURN_IF_ERROR(WriteTensor(*ids, {1, 3, -1, 2}));
    return out;
  };
  out_of_range.check = [](const std::vector<float>& got) {
    ASSERT_EQ(got.size(), 16u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[i], 10.0f + static_cast<float>(i));
      EXPECT_TRUE(std::isnan(got[4 + i])) << i;
      EXPECT_TRUE(std::isnan(got[8 + i])) << i;
      EXPECT_EQ(got[12 + i], 20.0f + static_cast<float>(i));
    }
  };
  cases.push_back(out_of_range);
}

void AddCopyCases(std::vector<KernelCase>& cases) {
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  int seed = 0;
  for (DType from : types) {
    for (DType to : types) {
      for (int layout = 0; layout < 4; ++layout) {
        const int s = seed++;
        cases.push_back(
            {absl::StrCat("cpy/", DTypeName(from), "_to_", DTypeName(to), "/",
                          layout),
             0.0, [=](Context& ctx) -> absl::StatusOr<Tensor*> {
               FERRY_ASSIGN_OR_RETURN(Tensor * a_leaf,
                                      ctx.NewTensor(from, {37, 6, 3}));
               Tensor* a = a_leaf;
               Tensor* b_leaf = nullptr;
               Tensor* b = nullptr;
               if (layout == 0) {  // Same shape, transposed source.
                 FERRY_ASSIGN_OR_RETURN(a, Transpose(ctx, a_leaf));
                 FERRY_ASSIGN_OR_RETURN(b_leaf, ctx.NewTensor(to, {6, 37, 3}));
                 b = b_leaf;
               } else if (layout == 1) {  // Other shape, strided destination.
                 FERRY_ASSIGN_OR_RETURN(b_leaf, ctx.NewTensor(to, {9, 37 * 2}));
                 FERRY_ASSIGN_OR_RETURN(
                     b, View3D(ctx, b_leaf, 9, 37, 2, b_leaf->nb[1] * 2,
                               b_leaf->nb[1], 0));
               } else if (layout == 2) {  // Both contiguous.
                 FERRY_ASSIGN_OR_RETURN(b_leaf, ctx.NewTensor(to, {37, 6, 3}));
                 b = b_leaf;
               } else {  // Into a transposed destination.
                 FERRY_ASSIGN_OR_RETURN(b_leaf, ctx.NewTensor(to, {6, 37, 3}));
                 FERRY_ASSIGN_OR_RETURN(b, Transpose(ctx, b_leaf));
               }
               FERRY_ASSIGN_OR_RETURN(Tensor * out, Cpy(ctx, a, b));
               FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
               // Wide range for rounding and overflow; the small-value
               // cases below cover subnormals.
               FERRY_RETURN_IF_ERROR(FillRandom(
                   *a_leaf, 100 + s, layout == 3 ? -1e-4f : -60000.0f,
                   layout == 3 ? 1e-4f : 60000.0f));
               return out;
             }});
      }
    }
  }
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (bool cpy : {false, true}) {
      cases.push_back(
          {absl::StrCat(cpy ? "cpy/same_dtype/" : "cont/", DTypeName(dtype)),
           0.0, [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                    ctx.NewTensor(dtype, {13, 7, 4, 2}));
             FERRY_ASSIGN_OR_RETURN(Tensor * permuted,
                                    Permute(ctx, a, 2, 0, 3, 1));
             Tensor* out;
             if (cpy) {
               FERRY_ASSIGN_OR_RETURN(Tensor * dst,
                                      ctx.NewTensor(dtype, {7 * 13, 8}));
               FERRY_ASSIGN_OR_RETURN(out, Cpy(ctx, permuted, dst));
             } else {
               FERRY_ASSIGN_OR_RETURN(out, Cont(ctx, permuted));
             }
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a, 7, -1000.0f, 1000.0f));
             return out;
           }});
    }
  }
}

void AddConcatCases(std::vector<KernelCase>& cases) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (int dim = 0; dim < 4; ++dim) {
      cases.push_back(
          {absl::StrCat("concat/", DTypeName(dtype), "/dim", dim), 0.0,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             const Shape ne = {5, 4, 3, 2};
             Shape bne = ne;
             bne[dim] = 3;
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a,
                 ctx.NewTensor(dtype, {ne[1], ne[0], ne[2], ne[3]}));
             FERRY_ASSIGN_OR_RETURN(Tensor * at, Transpose(ctx, a));
             Tensor* b_leaf;
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * b, Strided(ctx, dtype, bne, 1 + dim % 3, &b_leaf));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, Concat(ctx, at, b, dim));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a, 11, -100.0f, 100.0f));
             FERRY_RETURN_IF_ERROR(FillRandom(*b_leaf, 12, -100.0f, 100.0f));
             return out;
           }});
    }
  }
}

void AddInPlaceCases(std::vector<KernelCase>& cases) {
  for (const ::ferry::testing::InPlaceOpBuilder& op :
       ::ferry::testing::InPlaceOpBuilders()) {
    for (int64_t width : {20, 700}) {
      const auto fn = op.build;
      KernelCase c;
      c.name = absl::StrCat("in_place/", op.name, "/", width);
      c.tolerance = kTolF32;
      c.in_place = true;
      c.build = [=](Context& ctx) -> absl::StatusOr<Tensor*> {
        FERRY_ASSIGN_OR_RETURN(Tensor * a,
                               ctx.NewTensor(DType::kF32, {width, 5, 3}));
        FERRY_ASSIGN_OR_RETURN(Tensor * b,
                               ctx.NewTensor(DType::kF32, {width, 5, 3}));
        FERRY_ASSIGN_OR_RETURN(Tensor * pos, ctx.NewTensor(DType::kI32, {3}));
        FERRY_ASSIGN_OR_RETURN(Tensor * out, fn(ctx, a, b, pos));
        FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
        FERRY_RETURN_IF_ERROR(FillRandom(*a, 1, -3.0f, 3.0f));
        FERRY_RETURN_IF_ERROR(FillRandom(*b, 2, 0.5f, 2.0f));
        FERRY_RETURN_IF_ERROR(FillRandom(*pos, 3, 0.0f, 50.0f));
        out->data = a->data;
        return out;
      };
      cases.push_back(std::move(c));
    }
  }
}

void AddChainCase(std::vector<KernelCase>& cases) {
  // A small transformer-ish block: nodes feed each other.
  cases.push_back(
      {"chain", 1e-6, [](Context& ctx) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * x,
                                ctx.NewTensor(DType::kF32, {64, 9}));
         FERRY_ASSIGN_OR_RETURN(Tensor * w,
                                ctx.NewTensor(DType::kF16, {64, 48}));
         FERRY_ASSIGN_OR_RETURN(Tensor * g, ctx.NewTensor(DType::kF32, {64}));
         FERRY_ASSIGN_OR_RETURN(Tensor * pos, ctx.NewTensor(DType::kI32, {9}));
         FERRY_ASSIGN_OR_RETURN(Tensor * norm, RmsNorm(ctx, x, 1e-6f));
         FERRY_ASSIGN_OR_RETURN(Tensor * h, Mul(ctx, norm, g));
         FERRY_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, w, h));  // [48, 9]
         FERRY_ASSIGN_OR_RETURN(Tensor * q3, Reshape(ctx, q, {16, 3, 9}));
         FERRY_ASSIGN_OR_RETURN(Tensor * r,
                                Rope(ctx, q3, pos, 16, RopeMode::kNeox));
         FERRY_ASSIGN_OR_RETURN(Tensor * rp, Permute(ctx, r, 0, 2, 1, 3));
         FERRY_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, rp, rp));  // [9, 9, 3]
         FERRY_ASSIGN_OR_RETURN(Tensor * sm, SoftMax(ctx, kq, nullptr, 0.25f));
         FERRY_ASSIGN_OR_RETURN(Tensor * smt, Transpose(ctx, sm));
         FERRY_ASSIGN_OR_RETURN(Tensor * cont, Cont(ctx, smt));
         FERRY_ASSIGN_OR_RETURN(Tensor * out, Gelu(ctx, cont));
         FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
         FERRY_RETURN_IF_ERROR(FillRandom(*x, 1));
         FERRY_RETURN_IF_ERROR(FillRandom(*w, 2));
         FERRY_RETURN_IF_ERROR(FillRandom(*g, 3));
         FERRY_RETURN_IF_ERROR(FillRandom(*pos, 4, 0.0f, 100.0f));
         return out;
       }});
}

// Tensors moved to an address that is not a multiple of their element
// size (a word access there faults on a GPU): each gets a carrier tensor
// with room for it, and after AllocateHostData, Apply() points it `skew`
// bytes into its carrier. Views may start at any byte offset, so kernels
// must read and write such addresses.
class Misaligner {
 public:
  absl::StatusOr<Tensor*> New(Context& ctx, DType dtype, Shape ne,
                              int64_t skew) {
    FERRY_ASSIGN_OR_RETURN(Tensor * t,
                           ctx.NewTensor(dtype, {ne[0], ne[1], ne[2], ne[3]}));
    FERRY_ASSIGN_OR_RETURN(Tensor * carrier,
                           ctx.NewTensor(DType::kF32, {t->NumBytes() / 4 + 2}));
    moves_.push_back({t, carrier, skew});
    return t;
  }
  // Moves `t` (already made, e.g. an op's output) the same way.
  absl::Status Move(Context& ctx, Tensor* t, int64_t skew) {
    FERRY_ASSIGN_OR_RETURN(Tensor * carrier,
                           ctx.NewTensor(DType::kF32, {t->NumBytes() / 4 + 2}));
    moves_.push_back({t, carrier, skew});
    return absl::OkStatus();
  }
  void Apply(const Context& ctx) {
    for (const MoveTo& m : moves_) {
      m.tensor->data = static_cast<char*>(m.carrier->data) + m.skew;
    }
    // Views of moved tensors (cpy's result is b's) follow them.
    for (Tensor* t : ctx.tensors()) {
      if (t->view_src != nullptr && t->view_src->data != nullptr) {
        t->data = static_cast<char*>(t->view_src->data) + t->view_offset;
      }
    }
  }
  bool IsCarrier(const Tensor* t) const {
    for (const MoveTo& m : moves_) {
      if (m.carrier == t) return true;
    }
    return false;
  }

 private:
  struct MoveTo {
    Tensor* tensor;
    Tensor* carrier;
    int64_t skew;
  };
  std::vector<MoveTo> moves_;
};

void AddMisalignedCases(std::vector<KernelCase>& cases) {
  using Build = absl::StatusOr<Tensor*> (*)(Context&, Misaligner&);
  const std::pair<const char*, Build> kOps[] = {
      {"add",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {37, 3, 1, 1}, 2));
         FERRY_ASSIGN_OR_RETURN(Tensor * b,
                                m.New(ctx, DType::kF32, {37, 3, 1, 1}, 1));
         return Add(ctx, a, b);
       }},
      {"mul_row",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {37, 3, 1, 1}, 3));
         FERRY_ASSIGN_OR_RETURN(Tensor * b,
                                m.New(ctx, DType::kF32, {37, 1, 1, 1}, 2));
         return Mul(ctx, a, b);
       }},
      {"silu",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {37, 3, 1, 1}, 2));
         return Silu(ctx, a);
       }},
      {"rms_norm",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {70, 3, 1, 1}, 2));
         return RmsNorm(ctx, a, 1e-5f);
       }},
      {"soft_max",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {70, 3, 1, 1}, 1));
         FERRY_ASSIGN_OR_RETURN(Tensor * mask,
                                m.New(ctx, DType::kF32, {70, 3, 1, 1}, 3));
         return SoftMax(ctx, a, mask, 0.5f);
       }},
      {"rope",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {16, 2, 3, 1}, 2));
         FERRY_ASSIGN_OR_RETURN(Tensor * pos,
                                m.New(ctx, DType::kI32, {3, 1, 1, 1}, 1));
         return Rope(ctx, a, pos, 12, RopeMode::kNeox);
       }},
      {"get_rows",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF16, {9, 5, 1, 1}, 1));
         FERRY_ASSIGN_OR_RETURN(Tensor * ids,
                                m.New(ctx, DType::kI32, {4, 1, 1, 1}, 2));
         return GetRows(ctx, a, ids);
       }},
      {"cpy_f32_f16",
       [](Context& ctx, Misaligner& m) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                m.New(ctx, DType::kF32, {13, 4, 1, 1}, 2));
         FERRY_ASSIGN_OR_RETURN(Tensor * b,
                                m.New(ctx, DType::kF16, {13, 4, 1, 1}, 1));
         return Cpy(ctx, a, b);
       }},
  };
  for (const auto& [name, build] : kOps) {
    const Build fn = build;
    cases.push_back({absl::StrCat("misaligned/", name), kTolF32,
                     [fn](Context& ctx) -> absl::StatusOr<Tensor*> {
                       Misaligner m;
                       FERRY_ASSIGN_OR_RETURN(Tensor * out, fn(ctx, m));
                       if (out->op != Op::kCpy)
                         FERRY_RETURN_IF_ERROR(m.Move(ctx, out, 2));
                       FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
                       m.Apply(ctx);
                       int seed = 90;
                       for (Tensor* leaf : ctx.tensors()) {
                         if (leaf->op != Op::kNone ||
                             leaf->view_src != nullptr || m.IsCarrier(leaf)) {
                           continue;
                         }
                         if (leaf->dtype == DType::kI32) {
                           FERRY_RETURN_IF_ERROR(
                               FillRandom(*leaf, ++seed, 0.0f, 4.0f));
                         } else {
                           FERRY_RETURN_IF_ERROR(FillRandom(*leaf, ++seed));
                         }
                       }
                       return out;
                     }});
  }
}

// Block-quantized weights: few columns (decode, dequantized as read, f32
// products) and many (a prompt: a dequantized to f16 and b rounded to f16
// for the GEMM), with batches broadcast as in GQA.
void AddQuantMulMatCases(std::vector<KernelCase>& cases) {
  struct Shapes {
    const char* name;
    Shape a, b;
  };
  const std::vector<Shapes> shapes = {
      {"gemv", {96, 17, 1, 1}, {96, 1, 1, 1}},
      {"decode_batch", {64, 9, 2, 1}, {64, 3, 4, 1}},
      {"prompt", {128, 24, 1, 1}, {128, 40, 1, 1}},
      {"prompt_gqa", {64, 8, 2, 1}, {64, 12, 4, 1}},
  };
  // The K formats' rows are whole 256-element super-blocks; two of them per
  // row in the gemv case. Few result rows: each is a block of emulated
  // threads on the fake (108 rows took 5-7 s a case under ASan).
  const std::vector<Shapes> k_shapes = {
      {"gemv", {512, 5, 1, 1}, {512, 1, 1, 1}},
      {"decode_batch", {256, 3, 2, 1}, {256, 2, 4, 1}},
      {"prompt_gqa", {256, 8, 2, 1}, {256, 12, 4, 1}},
  };
  for (DType dtype :
       {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
        DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
        DType::kQ6_K, DType::kIQ4_XS}) {
    for (const Shapes& f : DTypeBlockSize(dtype) == 256 ? k_shapes : shapes) {
      const Shape an = f.a, bn = f.b;
      const double tol = bn[1] <= 8 ? kTolMatMulF32 : kTolMatMulF16;
      cases.push_back(
          {absl::StrCat("mul_mat/", DTypeName(dtype), "/", f.name), tol,
           [=](Context& ctx) -> absl::StatusOr<Tensor*> {
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * a,
                 ctx.NewTensor(dtype, {an[0], an[1], an[2], an[3]}));
             FERRY_ASSIGN_OR_RETURN(
                 Tensor * b,
                 ctx.NewTensor(DType::kF32, {bn[0], bn[1], bn[2], bn[3]}));
             FERRY_ASSIGN_OR_RETURN(Tensor * out, MulMat(ctx, a, b));
             FERRY_RETURN_IF_ERROR(ctx.AllocateHostData());
             FERRY_RETURN_IF_ERROR(FillRandom(*a, 5));
             FERRY_RETURN_IF_ERROR(FillRandom(*b, 6));
             return out;
           }});
    }
  }
}

// Overwrites every element `t` covers with NaN (a sentinel for i32), so an
// executor that skips elements cannot pass on values the reference left.
absl::Status Poison(Tensor& t) {
  const float value = t.dtype == DType::kI32
                          ? -777.0f
                          : std::numeric_limits<float>::quiet_NaN();
  return WriteTensor(
      t, std::vector<float>(static_cast<size_t>(t.NumElements()), value));
}

}  // namespace

std::vector<KernelCase> AllKernelCases() {
  std::vector<KernelCase> cases;
  AddMulMatCases(cases);
  AddQuantMulMatCases(cases);
  AddElementWiseCases(cases);
  AddSoftMaxCases(cases);
  AddRopeCases(cases);
  AddGetRowsCases(cases);
  AddSetRowsCases(cases);
  AddCopyCases(cases);
  AddConcatCases(cases);
  AddInPlaceCases(cases);
  AddChainCase(cases);
  AddMisalignedCases(cases);
  return cases;
}

void ExpectCaseMatches(const KernelCase& test_case, const RunGraphFn& run) {
  SCOPED_TRACE(test_case.name);
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, test_case.build(ctx));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  // Inputs, saved so in-place cases start the executor from the same values.
  std::vector<std::pair<Tensor*, std::vector<std::byte>>> saved;
  for (Tensor* leaf : graph.leafs()) {
    if (leaf->view_src != nullptr || leaf->data == nullptr) continue;
    const auto* p = static_cast<const std::byte*>(leaf->data);
    saved.emplace_back(leaf, std::vector<std::byte>(p, p + leaf->NumBytes()));
  }
  std::vector<float> want;
  if (!test_case.check) {
    FERRY_ASSERT_OK(EvaluateReference(graph));
    FERRY_ASSERT_OK_AND_ASSIGN(want, ReadTensor(*out));
    for (const auto& [leaf, bytes] : saved) {
      if (!bytes.empty()) std::memcpy(leaf->data, bytes.data(), bytes.size());
    }
  }
  for (Tensor* node : graph.nodes()) {
    if (IsViewOp(node->op)) continue;
    const bool in_place = test_case.in_place && node == out;
    // Cpy: poisons b's elements, which it overwrites. set_rows writes only
    // some rows of its cache; the others are its input.
    if (!in_place && node->op != Op::kSetRows) {
      FERRY_ASSERT_OK(Poison(*node));
    }
  }
  FERRY_ASSERT_OK(run(graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
  if (test_case.check) {
    test_case.check(got);
    return;
  }
  SCOPED_TRACE(out->DebugString());
  const double nmse = Nmse(want, got);
  EXPECT_LE(nmse, test_case.tolerance);  // Fails on NaN too.
  if (test_case.tolerance == 0) {
    EXPECT_EQ(got, want);
  }
}

}  // namespace cuda_kernels_internal
}  // namespace ferry
