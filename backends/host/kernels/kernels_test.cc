#include "ferry/backends/host/kernels/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_packed_buffer.h"
#include "ferry/backends/host/internal/mat_mul.h"
#include "ferry/backends/host/kernels/internal/vec.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/graph/context.h"
#include "ferry/graph/dtype.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/graph/testing/in_place_ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/sanitizer_build.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::cpu_kernels {
namespace {

using ::ferry::testing::EvaluateReference;
using ::ferry::testing::FillRandom;
using ::ferry::testing::Nmse;
using ::ferry::testing::ReadTensor;
using ::ferry::testing::StatusIs;
using ::ferry::testing::WriteTensor;

constexpr int kThreadCounts[] = {1, 2, 3, 7};

// Tolerances (NMSE).
constexpr double kTolF32 = 1e-10;  // Element-wise and row-wise f32.
constexpr double kTolMatMulF32 = 1e-6;
constexpr double kTolMatMulHalf = 1e-5;  // f16/bf16 weights.

// Overwrites every element `t` covers with NaN (or a sentinel for i32), so a
// kernel that skips elements cannot pass on values left by another run.
void Poison(Tensor& t) {
  const float value = t.dtype == DType::kI32
                          ? -777.0f
                          : std::numeric_limits<float>::quiet_NaN();
  ASSERT_THAT(WriteTensor(t, std::vector<float>(
                                 static_cast<size_t>(t.NumElements()), value)),
              ::ferry::testing::IsOk());
}

void PoisonResults(const Graph& graph) {
  for (Tensor* node : graph.nodes()) {
    if (IsViewOp(node->op)) continue;
    Poison(*node);  // Cpy: poisons b's elements, which it overwrites.
  }
}

// Computes `out` with the kernels on each thread count and with the
// reference, and expects NMSE <= tolerance. The graph's leafs must be filled.
void ExpectMatchesReference(Tensor* out, double tolerance,
                            const std::string& label) {
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  FERRY_ASSERT_OK(EvaluateReference(graph));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> want, ReadTensor(*out));
  for (int nth : kThreadCounts) {
    SCOPED_TRACE(absl::StrCat(label, " nth=", nth, " ", out->DebugString()));
    PoisonResults(graph);
    KernelRunner runner(nth);
    FERRY_ASSERT_OK(runner.Run(graph.nodes()));
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
    const double nmse = Nmse(want, got);
    EXPECT_LE(nmse, tolerance);  // Fails on NaN too.
    if (tolerance == 0) {
      EXPECT_EQ(got, want);
    }
  }
}

int64_t Rand(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A tensor of shape ne with rows contiguous but not the rest: a view of a
// larger leaf with padded rows, or a permute of dims 1 and 2. `leaf` gets
// the tensor to fill.
Tensor* Strided(Context& ctx, DType dtype, std::array<int64_t, 4> ne, int kind,
                Tensor** leaf) {
  Tensor* t = nullptr;
  switch (kind % 3) {
    case 0: {  // Contiguous.
      t = *ctx.NewTensor(dtype, {ne[0], ne[1], ne[2], ne[3]});
      *leaf = t;
      return t;
    }
    case 1: {  // Padded rows, offset view.
      Tensor* base =
          *ctx.NewTensor(dtype, {ne[0] + 3, ne[1], ne[2], ne[3] + 1});
      const int64_t es = base->ElementSize();
      t = *View4D(ctx, base, ne[0], ne[1], ne[2], ne[3], base->nb[1],
                  base->nb[2], base->nb[3], 2 * es + base->nb[3]);
      *leaf = base;
      return t;
    }
    default: {  // Dims 1 and 2 swapped.
      Tensor* base = *ctx.NewTensor(dtype, {ne[0], ne[2], ne[1], ne[3]});
      t = *Permute(ctx, base, 0, 2, 1, 3);
      *leaf = base;
      return t;
    }
  }
}

// The code paths a CPU can take: row primitives and mul_mat each scalar
// (portable), AVX2 or AVX-512 (runtime/cpu_features.h's Isa). Each test runs
// on every path this CPU supports.
using Path = Isa;

std::vector<Path> SupportedPaths() {
  std::vector<Path> paths;
  for (Path path : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(path)) paths.push_back(path);
  }
  return paths;
}

// Forces `path` for the scope of a test.
void ForcePath(Path path) {
  cpu_kernels_internal::ForceIsaForTesting(path);
  cpu_internal::ForceIsaForTesting(path);
}

void ResetPath() {
  cpu_kernels_internal::ForceIsaForTesting(std::nullopt);
  cpu_internal::ForceIsaForTesting(std::nullopt);
}

class KernelsTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override { ForcePath(GetParam()); }
  void TearDown() override { ResetPath(); }
};

TEST_P(KernelsTest, MulMat) {
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int trial = 0; trial < 5; ++trial) {
      Context ctx;
      const int64_t k = trial == 4 ? 1100 : Rand(rng, 1, 70);
      const int64_t m = trial == 4 ? 6 : Rand(rng, 1, 40);
      const int64_t n = trial == 4 ? 5 : Rand(rng, 1, 17);
      const int64_t a2 = Rand(rng, 1, 2), a3 = Rand(rng, 1, 2);
      const int64_t b2 = a2 * Rand(rng, 1, 3), b3 = a3 * Rand(rng, 1, 2);
      Tensor *a_leaf, *b_leaf;
      Tensor* a = Strided(ctx, dtype, {k, m, a2, a3}, trial, &a_leaf);
      Tensor* b = Strided(ctx, DType::kF32, {k, n, b2, b3}, trial + 1, &b_leaf);
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, MulMat(ctx, a, b));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a_leaf, 10 + trial));
      FERRY_ASSERT_OK(FillRandom(*b_leaf, 20 + trial));
      ExpectMatchesReference(
          out, dtype == DType::kF32 ? kTolMatMulF32 : kTolMatMulHalf,
          absl::StrCat("mul_mat ", DTypeName(dtype)));
    }
  }
}

TEST_P(KernelsTest, MulMatManyThreadsSmallOutput) {
  // Fewer output tiles than threads: some threads get nothing.
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {33, 2});
  Tensor* b = *ctx.NewTensor(DType::kF32, {33, 1});
  Tensor* out = *MulMat(ctx, a, b);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*a, 1));
  FERRY_ASSERT_OK(FillRandom(*b, 2));
  ExpectMatchesReference(out, kTolMatMulF32, "mul_mat small");
}

TEST_P(KernelsTest, MulMatLargeSlices) {
  // Slices too large to go whole to one thread, a broadcast over dim 2:
  // every thread computes a share of each.
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF16, {160, 200, 1, 1});
  Tensor* b = *ctx.NewTensor(DType::kF32, {160, 140, 3, 1});
  Tensor* out = *MulMat(ctx, a, b);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*a, 1));
  FERRY_ASSERT_OK(FillRandom(*b, 2));
  ExpectMatchesReference(out, kTolMatMulHalf, "mul_mat large slices");
}

TEST_P(KernelsTest, MulMatOverlappingRows) {
  // Row strides below K (rows of a and b overlap, or repeat with stride 0).
  for (int64_t a_stride : {0, 3}) {
    Context ctx;
    Tensor* a_leaf = *ctx.NewTensor(DType::kBF16, {64});
    Tensor* b_leaf = *ctx.NewTensor(DType::kF32, {128});
    Tensor* a = *View2D(ctx, a_leaf, 20, 5, a_stride * 2, 0);
    Tensor* b = *View3D(ctx, b_leaf, 20, 4, 3, 2 * 4, 30 * 4, 4);
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, MulMat(ctx, a, b));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*a_leaf, 3));
    FERRY_ASSERT_OK(FillRandom(*b_leaf, 4));
    ExpectMatchesReference(out, kTolMatMulHalf,
                           absl::StrCat("mul_mat overlapping ", a_stride));
  }
}

TEST_P(KernelsTest, MulMatEmptyK) {
  // K = 0: every sum is empty, so dst is all zeros.
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {0, 5, 2});
  Tensor* b = *ctx.NewTensor(DType::kF32, {0, 3, 4});
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, MulMat(ctx, a, b));
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  ExpectMatchesReference(out, 0.0, "mul_mat k=0");
}

// ---------------------------------------------------------------------------
// Weights stored packed (cpu_packed_buffer.h).

// Copies the values of host tensor `plain` into a new tensor of the same
// dtype and shape placed in a CpuPackedBuffer (kept alive in `buffers`).
Tensor* PackedCopy(Context& ctx, const Tensor& plain,
                   std::vector<std::unique_ptr<Buffer>>& buffers) {
  static CpuPackedBufferType type(nullptr);
  Tensor* t = *ctx.NewTensor(
      plain.dtype, {plain.ne[0], plain.ne[1], plain.ne[2], plain.ne[3]});
  t->name = plain.name + "_packed";
  buffers.push_back(*type.Allocate(type.AllocSize(*t)));
  FERRY_CHECK(PlaceTensor(*buffers.back(), *t, 0).ok());
  FERRY_CHECK(SetTensorData(*t, plain.data).ok());
  return t;
}

// Computes want = op(plain a, ...) with the reference and got = the same op
// on a packed copy of a with the kernels, on each thread count. References
// are kept per label across the paths (inputs are seeded, so a label names
// one computation): the model-sized ones take seconds each.
void ExpectPackedMatchesReference(Tensor* want_out, Tensor* got_out,
                                  double tolerance, const std::string& label) {
  static auto* references = new std::map<std::string, std::vector<float>>;
  auto it = references->find(label);
  if (it == references->end()) {
    FERRY_ASSERT_OK_AND_ASSIGN(Graph want_graph, Graph::Build({want_out}));
    FERRY_ASSERT_OK(EvaluateReference(want_graph));
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> values,
                               ReadTensor(*want_out));
    it = references->emplace(label, std::move(values)).first;
  }
  const std::vector<float>& want = it->second;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({got_out}));
  for (int nth : kThreadCounts) {
    SCOPED_TRACE(
        absl::StrCat(label, " nth=", nth, " ", got_out->DebugString()));
    Poison(*got_out);
    KernelRunner runner(nth);
    FERRY_ASSERT_OK(runner.Run(graph.nodes()));
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*got_out));
    const double nmse = Nmse(want, got);
    EXPECT_LE(nmse, tolerance);  // Fails on NaN too.
    if (tolerance == 0) {
      EXPECT_EQ(got, want);
    }
  }
}

struct PackedCase {
  int64_t k, m, n;
  int64_t a2 = 1;  // Slices of a; b has a2 * r2 of them (broadcast).
  int64_t r2 = 1;
};

TEST_P(KernelsTest, MulMatModelShapesPackedAndRows) {
  // The forward's weight shapes (n_embd 2048, n_ff 5632) at 1, 8 and 32
  // tokens, a 512-token batch on a smaller weight, odd sizes (an unaligned
  // M of 520 >= kMinUnalignedPackedRows, K not a multiple of anything) and
  // slices broadcast over b.
  // Under a sanitizer (10x slower, and what it checks does not depend on
  // size) the model-sized weights shrink by 8 in each dimension.
  constexpr int64_t kDiv = kSanitizerBuild ? 8 : 1;
  const PackedCase cases[] = {
      {2048 / kDiv, 5632 / kDiv, 1},
      {2048 / kDiv, 5632 / kDiv, 8},
      {2048 / kDiv, 5632 / kDiv, 32},
      {256, 640, 512 / kDiv},
      {33, 520, 7},
      {70, 128, 13},
      {19, 64, 3, 2, 2},
  };
  int seed = 0;
  for (const PackedCase& c : cases) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      // The model-sized shapes in f32 and f16 only, 32 tokens in f32.
      if (c.m * c.k > 1000000 &&
          (dtype == DType::kBF16 || (dtype == DType::kF16 && c.n > 8))) {
        continue;
      }
      Context ctx;
      Tensor* a = *ctx.NewTensor(dtype, {c.k, c.m, c.a2});
      a->name = "a";
      Tensor* b = *ctx.NewTensor(DType::kF32, {c.k, c.n, c.a2 * c.r2});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * want, MulMat(ctx, a, b));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a, 200 + seed));
      FERRY_ASSERT_OK(FillRandom(*b, 300 + seed++));
      std::vector<std::unique_ptr<Buffer>> buffers;
      Tensor* packed = PackedCopy(ctx, *a, buffers);
      ASSERT_EQ(GetPackedState(*packed), PackedState::kPacked);
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * got, MulMat(ctx, packed, b));
      // The same product from the rows (the unpacked path) for comparison.
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * got_rows, MulMat(ctx, a, b));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      const std::string label = absl::StrCat(
          "mul_mat ", DTypeName(dtype), " k=", c.k, " m=", c.m, " n=", c.n);
      const double tolerance =
          dtype == DType::kF32 ? kTolMatMulF32 : kTolMatMulHalf;
      ExpectPackedMatchesReference(want, got, tolerance, label);
      ExpectPackedMatchesReference(want, got_rows, tolerance, label);
    }
  }
}

TEST_P(KernelsTest, GetRowsFromPackedTable) {
  // Tied embeddings: the output matrix, packed, is also the token table.
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Context ctx;
    Tensor* table = *ctx.NewTensor(dtype, {40, 576, 2});
    table->name = "table";
    Tensor* ids = *ctx.NewTensor(DType::kI32, {9, 2});
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * want, GetRows(ctx, table, ids));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*table, 5));
    FERRY_ASSERT_OK(FillRandom(*ids, 6, 0.0f, 576.0f));
    std::vector<std::unique_ptr<Buffer>> buffers;
    Tensor* packed = PackedCopy(ctx, *table, buffers);
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * got, GetRows(ctx, packed, ids));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    ExpectPackedMatchesReference(want, got, 0.0,
                                 absl::StrCat("get_rows ", DTypeName(dtype)));
  }
}

// q4_0, q4_1, q5_0, q5_1 and q8_0 weights stored in groups of 8 rows
// (quant_group_layout.h): mul_mat on the group tiles (1 token to a prompt's
// worth, slices broadcast) matches the reference and the same product from
// rows; get_rows and GetTensor give the stored bytes back.
TEST_P(KernelsTest, GroupedQuantWeightsMulMatAndGetRows) {
  struct Case {
    int64_t k, m, n, a2, r2;
  };
  int seed = 0;
  for (DType dtype :
       {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0}) {
    for (const Case& c : {Case{160, 64, 1, 1, 1}, Case{160, 64, 5, 1, 1},
                          Case{96, 40, 100, 1, 1}, Case{64, 16, 3, 2, 2}}) {
      Context ctx;
      Tensor* a = *ctx.NewTensor(dtype, {c.k, c.m, c.a2});
      a->name = "a";
      Tensor* b = *ctx.NewTensor(DType::kF32, {c.k, c.n, c.a2 * c.r2});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * want, MulMat(ctx, a, b));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a, 400 + seed));
      FERRY_ASSERT_OK(FillRandom(*b, 500 + seed++));
      std::vector<std::unique_ptr<Buffer>> buffers;
      Tensor* packed = PackedCopy(ctx, *a, buffers);
      ASSERT_EQ(GetPackedState(*packed), PackedState::kPacked);
      std::vector<std::byte> back(static_cast<size_t>(a->NumBytes()));
      FERRY_ASSERT_OK(GetTensorData(*packed, back.data()));
      EXPECT_EQ(std::memcmp(back.data(), a->data, back.size()), 0);
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * got, MulMat(ctx, packed, b));
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * got_rows, MulMat(ctx, a, b));
      Tensor* ids = *ctx.NewTensor(DType::kI32, {7, c.a2});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * rows_want, GetRows(ctx, a, ids));
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * rows_got, GetRows(ctx, packed, ids));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(
          FillRandom(*ids, 600 + seed, 0.0f, static_cast<float>(c.m)));
      const std::string label =
          absl::StrCat(DTypeName(dtype), " k=", c.k, " m=", c.m, " n=", c.n);
      // The rounding of activations to 8 bits (NMSE ~1e-5).
      ExpectPackedMatchesReference(want, got, 1e-4, "mul_mat " + label);
      ExpectPackedMatchesReference(want, got_rows, 1e-4, "mul_mat " + label);
      ExpectPackedMatchesReference(rows_want, rows_got, 0.0,
                                   "get_rows " + label);
    }
  }
}

TEST(PackedWeightsTest, OtherReadersAreRefused) {
  Context ctx;
  Tensor* w = *ctx.NewTensor(DType::kF32, {32, 128});
  w->name = "w";
  Tensor* x = *ctx.NewTensor(DType::kF32, {32, 128});
  Tensor* v = *ctx.NewTensor(DType::kF32, {32, 4});
  Tensor* u = *ctx.NewTensor(DType::kF32, {64, 4});
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  std::vector<std::unique_ptr<Buffer>> buffers;
  Tensor* packed = PackedCopy(ctx, *w, buffers);
  // The readers that know panels.
  FERRY_EXPECT_OK(CheckSupported(**MulMat(ctx, packed, v)));
  Tensor* ids = *ctx.NewTensor(DType::kI32, {3});
  FERRY_EXPECT_OK(CheckSupported(**GetRows(ctx, packed, ids)));
  // Everything else, naming the tensor.
  const auto refused = [](const absl::StatusOr<Tensor*>& node) {
    const absl::Status status = CheckSupported(**node);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnimplemented));
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("w_packed"));
  };
  refused(Add(ctx, packed, x));
  refused(Add(ctx, x, packed));
  refused(Scale(ctx, packed, 2.0f));
  refused(Cont(ctx, packed));
  refused(MulMat(ctx, x, packed));                           // As b.
  refused(MulMat(ctx, *Reshape(ctx, packed, {64, 64}), u));  // A view.
  refused(MulMat(ctx, *View2D(ctx, packed, 32, 64, packed->nb[1], 0), v));
  refused(Cpy(ctx, x, packed));  // Writing into it.
  // Views themselves compute nothing and pass; reading one does not.
  FERRY_EXPECT_OK(CheckSupported(**Transpose(ctx, packed)));
  // The same tensor in host memory is plain.
  FERRY_EXPECT_OK(CheckSupported(**Add(ctx, w, x)));
}

TEST_P(KernelsTest, Binary) {
  std::mt19937 rng(2);
  using BuildFn = absl::StatusOr<Tensor*> (*)(Context&, Tensor*, Tensor*);
  const std::pair<const char*, BuildFn> ops[] = {
      {"add", &Add}, {"sub", &Sub}, {"mul", &Mul}, {"div", &Div}};
  for (const auto& [name, build] : ops) {
    for (int trial = 0; trial < 6; ++trial) {
      Context ctx;
      std::array<int64_t, 4> ne = {Rand(rng, 1, 300), Rand(rng, 1, 6),
                                   Rand(rng, 1, 3), Rand(rng, 1, 2)};
      if (trial == 5) ne = {1000, 1, 1, 1};  // One long row: split columns.
      std::array<int64_t, 4> bne = ne;
      for (int i = 0; i < 4; ++i) {
        // Broadcast some dims: b.ne[i] = 1 or a divisor.
        const int pick = static_cast<int>(Rand(rng, 0, 2));
        if (pick == 0) bne[i] = 1;
        if (pick == 1 && ne[i] % 2 == 0) bne[i] = ne[i] / 2;
      }
      Tensor *a_leaf, *b_leaf;
      Tensor* a = Strided(ctx, DType::kF32, ne, trial, &a_leaf);
      Tensor* b = Strided(ctx, DType::kF32, bne, trial + 2, &b_leaf);
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, build(ctx, a, b));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a_leaf, 30 + trial));
      FERRY_ASSERT_OK(FillRandom(*b_leaf, 40 + trial, 0.5f, 2.0f));
      ExpectMatchesReference(out, kTolF32, name);
    }
  }
}

TEST_P(KernelsTest, UnaryAndNorms) {
  std::mt19937 rng(3);
  using BuildFn = absl::StatusOr<Tensor*> (*)(Context&, Tensor*);
  const std::pair<const char*, BuildFn> ops[] = {
      {"scale", [](Context& c, Tensor* a) { return Scale(c, a, -0.37f); }},
      {"silu", &Silu},
      {"gelu", &Gelu},
      {"relu", &Relu},
      {"tanh", &Tanh},
      {"rms_norm", [](Context& c, Tensor* a) { return RmsNorm(c, a, 1e-5f); }},
      {"norm", [](Context& c, Tensor* a) { return Norm(c, a, 1e-5f); }},
  };
  for (const auto& [name, build] : ops) {
    for (int trial = 0; trial < 5; ++trial) {
      Context ctx;
      std::array<int64_t, 4> ne = {Rand(rng, 1, 300), Rand(rng, 1, 6),
                                   Rand(rng, 1, 3), Rand(rng, 1, 2)};
      if (trial == 4) ne = {2000, 1, 1, 1};
      Tensor* leaf;
      Tensor* a = Strided(ctx, DType::kF32, ne, trial, &leaf);
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, build(ctx, a));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      // Wide range: exercises exp's clamping in silu and gelu.
      FERRY_ASSERT_OK(FillRandom(*leaf, 50 + trial, -12.0f, 12.0f));
      ExpectMatchesReference(out, kTolF32, name);
    }
  }
}

TEST_P(KernelsTest, ActivationsExtremeValues) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {24});
  Tensor* silu = *Silu(ctx, a);
  Tensor* gelu = *Gelu(ctx, a);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(WriteTensor(
      *a,
      {-200, -100, -88, -87.5, -50, -20, -5,   -1, -1e-3, -1e-30, 0,   1e-30,
       1e-3, 1,    5,   20,    44,  50,  87.5, 88, 88.7f, 89,     100, 200}));
  ExpectMatchesReference(silu, kTolF32, "silu");
  ExpectMatchesReference(gelu, kTolF32, "gelu");
}

TEST_P(KernelsTest, SoftMax) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 8; ++trial) {
    Context ctx;
    const std::array<int64_t, 4> ne = {Rand(rng, 1, 200), Rand(rng, 1, 7),
                                       Rand(rng, 1, 4), Rand(rng, 1, 2)};
    Tensor* leaf;
    Tensor* a = Strided(ctx, DType::kF32, ne, trial, &leaf);
    Tensor* mask = nullptr;
    if (trial % 4 != 0) {
      const int64_t m2 = ne[2] % 2 == 0 && trial % 2 ? 2 : 1;
      mask = *ctx.NewTensor(DType::kF32, {ne[0], ne[1] + trial % 3, m2, 1});
    }
    FERRY_ASSERT_OK_AND_ASSIGN(
        Tensor * out, SoftMax(ctx, a, mask, trial == 3 ? 1.0f : 0.125f));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*leaf, 60 + trial, -8.0f, 8.0f));
    if (mask != nullptr) {
      // Causal-like: -inf right of the diagonal (column 0 always kept).
      std::vector<float> values;
      for (int64_t i2 = 0; i2 < mask->ne[2]; ++i2) {
        for (int64_t i1 = 0; i1 < mask->ne[1]; ++i1) {
          for (int64_t i0 = 0; i0 < mask->ne[0]; ++i0) {
            values.push_back(i0 > i1 + 3 + i2
                                 ? -std::numeric_limits<float>::infinity()
                                 : 0.1f *
                                       static_cast<float>((i0 * 7 + i1) % 5));
          }
        }
      }
      FERRY_ASSERT_OK(WriteTensor(*mask, values));
    }
    ExpectMatchesReference(out, kTolF32, "soft_max");
  }
}

TEST_P(KernelsTest, SoftMaxFullyMaskedRowIsNan) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {5, 2});
  Tensor* mask = *ctx.NewTensor(DType::kF32, {5, 2});
  Tensor* out = *SoftMax(ctx, a, mask, 1.0f);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*a, 1));
  const float inf = std::numeric_limits<float>::infinity();
  FERRY_ASSERT_OK(
      WriteTensor(*mask, {-inf, -inf, -inf, -inf, -inf, 0, 0, 0, -inf, 0}));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  KernelRunner runner(2);
  FERRY_ASSERT_OK(runner.Run(graph.nodes()));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
  EXPECT_EQ(got[8], 0.0f);
  EXPECT_NEAR(got[5] + got[6] + got[7] + got[9], 1.0f, 1e-6f);
}

TEST_P(KernelsTest, Rope) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 8; ++trial) {
    Context ctx;
    const int64_t head_dim = 2 * Rand(rng, 1, 40);
    const int64_t n_dims =
        trial % 3 == 0 ? head_dim : 2 * Rand(rng, 1, head_dim / 2);
    const std::array<int64_t, 4> ne = {head_dim, Rand(rng, 1, 5),
                                       Rand(rng, 1, 6), Rand(rng, 1, 2)};
    Tensor* leaf;
    Tensor* a = Strided(ctx, DType::kF32, ne, trial, &leaf);
    Tensor* pos = *ctx.NewTensor(DType::kI32, {ne[2]});
    const RopeMode mode = trial % 2 ? RopeMode::kNeox : RopeMode::kNormal;
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out,
                               Rope(ctx, a, pos, static_cast<int>(n_dims), mode,
                                    trial % 4 < 2 ? 10000.0f : 500000.0f,
                                    trial % 4 == 3 ? 0.25f : 1.0f));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*leaf, 70 + trial));
    FERRY_ASSERT_OK(FillRandom(*pos, 80 + trial, 0.0f, 4096.0f));
    ExpectMatchesReference(out, kTolF32, "rope");
  }
}

// Llama-3 rope scaling: each pair's frequency divided by its factor.
TEST_P(KernelsTest, RopeWithFreqFactors) {
  for (RopeMode mode : {RopeMode::kNeox, RopeMode::kNormal}) {
    Context ctx;
    const std::array<int64_t, 4> ne = {32, 3, 7, 1};
    Tensor* leaf;
    Tensor* a = Strided(ctx, DType::kF32, ne, 0, &leaf);
    Tensor* pos = *ctx.NewTensor(DType::kI32, {ne[2]});
    Tensor* factors = *ctx.NewTensor(DType::kF32, {12});
    FERRY_ASSERT_OK_AND_ASSIGN(
        Tensor * out, Rope(ctx, a, pos, 24, mode, 10000.0f, 1.0f, factors));
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*leaf, 90));
    FERRY_ASSERT_OK(FillRandom(*pos, 91, 0.0f, 4096.0f));
    FERRY_ASSERT_OK(FillRandom(*factors, 92, 1.0f, 8.0f));
    ExpectMatchesReference(out, kTolF32, "rope with factors");
  }
}

TEST_P(KernelsTest, GetRows) {
  std::mt19937 rng(6);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int trial = 0; trial < 4; ++trial) {
      Context ctx;
      const std::array<int64_t, 4> ne = {Rand(rng, 1, 100), Rand(rng, 1, 20),
                                         Rand(rng, 1, 3), Rand(rng, 1, 2)};
      Tensor* leaf;
      Tensor* a = Strided(ctx, dtype, ne, trial, &leaf);
      Tensor* ids =
          *ctx.NewTensor(DType::kI32, {Rand(rng, 1, 12), ne[2], ne[3]});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, GetRows(ctx, a, ids));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*leaf, 90 + trial));
      FERRY_ASSERT_OK(
          FillRandom(*ids, 95 + trial, 0.0f, static_cast<float>(ne[1])));
      ExpectMatchesReference(out, 0.0, "get_rows");
    }
  }
}

TEST_P(KernelsTest, GetRowsOutOfRangeGivesNan) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  Tensor* ids = *ctx.NewTensor(DType::kI32, {2});
  Tensor* out = *GetRows(ctx, a, ids);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*a, 1));
  FERRY_ASSERT_OK(WriteTensor(*ids, {1, 3}));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  KernelRunner runner(2);
  FERRY_ASSERT_OK(runner.Run(graph.nodes()));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, ReadTensor(*a));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i], rows[4 + i]);
    EXPECT_TRUE(std::isnan(got[4 + i]));
  }
}

// set_rows writes the listed rows of dst and no other: the kernels (on
// 1 and 3 threads) and the reference, each on its own copy of the same
// data, leave identical bytes in dst.
TEST_P(KernelsTest, SetRows) {
  std::mt19937 rng(8);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int nth : {0, 1, 3}) {  // 0: the reference.
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " nth=", nth));
      std::vector<std::vector<float>> results;
      for (int run = 0; run < 2; ++run) {
        Context ctx;
        Tensor* dst = *ctx.NewTensor(dtype, {37, 20});
        Tensor* rows = *ctx.NewTensor(DType::kF32, {37, 6});
        Tensor* ids = *ctx.NewTensor(DType::kI32, {6});
        FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, SetRows(ctx, dst, rows, ids));
        EXPECT_EQ(out->view_src, dst);
        FERRY_ASSERT_OK(ctx.AllocateHostData());
        FERRY_ASSERT_OK(FillRandom(*dst, 1));
        FERRY_ASSERT_OK(FillRandom(*rows, 2));
        FERRY_ASSERT_OK(WriteTensor(*ids, {19, 0, 7, 3, 12, 5}));
        FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
        if (run == 0) {
          FERRY_ASSERT_OK(EvaluateReference(graph));
        } else {
          KernelRunner runner(nth == 0 ? 1 : nth);
          FERRY_ASSERT_OK(runner.Run(graph.nodes()));
        }
        FERRY_ASSERT_OK_AND_ASSIGN(results.emplace_back(), ReadTensor(*dst));
        if (run == 0) {
          // Row 19 holds rows' row 0; row 1 was not written.
          FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> src, ReadTensor(*rows));
          EXPECT_NEAR(results[0][19 * 37 + 4], src[4], 1e-2);
        }
      }
      EXPECT_EQ(results[0], results[1]);
    }
  }
}

TEST_P(KernelsTest, SetRowsSkipsOutOfRangeIds) {
  Context ctx;
  Tensor* dst = *ctx.NewTensor(DType::kF32, {4, 3});
  Tensor* rows = *ctx.NewTensor(DType::kF32, {4, 2});
  Tensor* ids = *ctx.NewTensor(DType::kI32, {2});
  Tensor* out = *SetRows(ctx, dst, rows, ids);
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(WriteTensor(*dst, std::vector<float>(12, 5.0f)));
  FERRY_ASSERT_OK(WriteTensor(*rows, {1, 2, 3, 4, 6, 7, 8, 9}));
  FERRY_ASSERT_OK(WriteTensor(*ids, {3, 1}));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
  KernelRunner runner(2);
  FERRY_ASSERT_OK(runner.Run(graph.nodes()));
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*dst));
  EXPECT_EQ(got, (std::vector<float>{5, 5, 5, 5, 6, 7, 8, 9, 5, 5, 5, 5}));
  EXPECT_THAT(EvaluateReference(graph),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_P(KernelsTest, CpyAllFloatPairs) {
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16};
  int seed = 0;
  for (DType from : types) {
    for (DType to : types) {
      for (int layout = 0; layout < 3; ++layout) {
        Context ctx;
        Tensor* a_leaf = *ctx.NewTensor(from, {37, 6, 3});
        Tensor* a = a_leaf;
        Tensor* b_leaf = nullptr;
        Tensor* b = nullptr;
        if (layout == 0) {  // Same shape, transposed source.
          a = *Transpose(ctx, a_leaf);
          b = b_leaf = *ctx.NewTensor(to, {6, 37, 3});
        } else if (layout == 1) {  // Different shape, strided destination.
          // [9, 37, 2] over the rows of a [9, 74] leaf, interleaved.
          b_leaf = *ctx.NewTensor(to, {9, 37 * 2});
          b = *View3D(ctx, b_leaf, 9, 37, 2, b_leaf->nb[1] * 2, b_leaf->nb[1],
                      0);
        } else {  // Same shape, both contiguous (fast path).
          b = b_leaf = *ctx.NewTensor(to, {37, 6, 3});
        }
        FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, Cpy(ctx, a, b));
        FERRY_ASSERT_OK(ctx.AllocateHostData());
        FERRY_ASSERT_OK(FillRandom(*a_leaf, 100 + seed++, -60000.0f, 60000.0f));
        ExpectMatchesReference(out, 0.0,
                               absl::StrCat("cpy ", DTypeName(from), "->",
                                            DTypeName(to), " layout ", layout));
      }
    }
  }
}

TEST_P(KernelsTest, ContAndCpyI32) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI32}) {
    Context ctx;
    Tensor* a = *ctx.NewTensor(dtype, {13, 7, 4, 2});
    Tensor* permuted = *Permute(ctx, a, 2, 0, 3, 1);
    Tensor* cont = *Cont(ctx, permuted);
    Tensor* dst = *ctx.NewTensor(dtype, {7 * 13, 8});
    Tensor* cpy = *Cpy(ctx, permuted, dst);
    FERRY_ASSERT_OK(ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillRandom(*a, 7, -1000.0f, 1000.0f));
    ExpectMatchesReference(cont, 0.0, "cont");
    ExpectMatchesReference(cpy, 0.0, "cpy same dtype");
  }
}

// Copies whose shapes have dimensions of size 1 (attention's V transpose at
// one token: [1, head_dim, heads]) take the collapsed-dimension path: every
// permutation of such shapes, into a contiguous tensor (cont) and into a
// view with padded rows and an offset (cpy), matches the reference exactly.
TEST_P(KernelsTest, CopiesWithSizeOneDims) {
  const std::array<int64_t, 4> shapes[] = {
      {1, 8, 5, 1}, {3, 1, 4, 1}, {1, 1, 6, 2}, {5, 1, 1, 1}, {1, 1, 1, 1}};
  int perm[4] = {0, 1, 2, 3};
  int seed = 0;
  for (const auto& ne : shapes) {
    do {
      Context ctx;
      Tensor* a = *ctx.NewTensor(DType::kF32, {ne[0], ne[1], ne[2], ne[3]});
      Tensor* p = *Permute(ctx, a, perm[0], perm[1], perm[2], perm[3]);
      Tensor* cont = *Cont(ctx, p);
      Tensor* base = *ctx.NewTensor(
          DType::kF32, {p->ne[0] + 2, p->ne[1], p->ne[2], p->ne[3] + 1});
      Tensor* dst =
          *View4D(ctx, base, p->ne[0], p->ne[1], p->ne[2], p->ne[3],
                  base->nb[1], base->nb[2], base->nb[3], base->nb[3] + 4);
      Tensor* cpy = *Cpy(ctx, p, dst);
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a, 300 + seed++, -10.0f, 10.0f));
      const std::string label = absl::StrCat(
          a->ShapeString(), " perm ", perm[0], perm[1], perm[2], perm[3]);
      ExpectMatchesReference(cont, 0.0, "cont " + label);
      ExpectMatchesReference(cpy, 0.0, "cpy " + label);
    } while (std::next_permutation(perm, perm + 4));
  }
}

TEST_P(KernelsTest, Concat) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI32}) {
    for (int dim = 0; dim < 4; ++dim) {
      Context ctx;
      std::array<int64_t, 4> ne = {5, 4, 3, 2};
      std::array<int64_t, 4> bne = ne;
      bne[dim] = 3;
      Tensor* a = *ctx.NewTensor(dtype, {ne[1], ne[0], ne[2], ne[3]});
      Tensor* at = *Transpose(ctx, a);
      Tensor* b = *ctx.NewTensor(dtype, {bne[0], bne[1], bne[2], bne[3]});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, Concat(ctx, at, b, dim));
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a, 11, -100.0f, 100.0f));
      FERRY_ASSERT_OK(FillRandom(*b, 12, -100.0f, 100.0f));
      ExpectMatchesReference(out, 0.0, absl::StrCat("concat dim ", dim));
    }
  }
}

TEST_P(KernelsTest, ChainedGraph) {
  // A small transformer-ish block: the runner's barrier between nodes must
  // order producers before consumers.
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {64, 9});
  Tensor* w = *ctx.NewTensor(DType::kF16, {64, 48});
  Tensor* g = *ctx.NewTensor(DType::kF32, {64});
  Tensor* pos = *ctx.NewTensor(DType::kI32, {9});
  Tensor* h = *Mul(ctx, *RmsNorm(ctx, x, 1e-6f), g);
  Tensor* q = *MulMat(ctx, w, h);  // [48, 9]
  Tensor* q3 = *Reshape(ctx, q, {16, 3, 9});
  Tensor* r = *Rope(ctx, q3, pos, 16, RopeMode::kNeox);
  Tensor* kq = *MulMat(ctx, *Permute(ctx, r, 0, 2, 1, 3),
                       *Permute(ctx, r, 0, 2, 1, 3));  // [9, 9, 3]
  Tensor* sm = *SoftMax(ctx, kq, nullptr, 0.25f);
  Tensor* out = *Gelu(ctx, *Cont(ctx, *Transpose(ctx, sm)));
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  FERRY_ASSERT_OK(FillRandom(*x, 1));
  FERRY_ASSERT_OK(FillRandom(*w, 2));
  FERRY_ASSERT_OK(FillRandom(*g, 3));
  FERRY_ASSERT_OK(FillRandom(*pos, 4, 0.0f, 100.0f));
  ExpectMatchesReference(out, 1e-9, "chain");
}

// In place: each OpCanRunInPlace op, with node.data = src[0]->data, gives
// exactly the out-of-place result.
TEST_P(KernelsTest, InPlaceMatchesOutOfPlace) {
  std::vector<bool> covered(kNumOps, false);
  for (const ::ferry::testing::InPlaceOpBuilder& test_case :
       ::ferry::testing::InPlaceOpBuilders()) {
    for (int nth : {1, 3}) {
      SCOPED_TRACE(absl::StrCat(test_case.name, " nth=", nth));
      Context ctx;
      Tensor* a = *ctx.NewTensor(DType::kF32, {20, 5, 3});
      Tensor* b = *ctx.NewTensor(DType::kF32, {20, 5, 3});
      Tensor* pos = *ctx.NewTensor(DType::kI32, {3});
      FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, test_case.build(ctx, a, b, pos));
      covered[static_cast<int>(out->op)] = true;
      FERRY_ASSERT_OK(ctx.AllocateHostData());
      FERRY_ASSERT_OK(FillRandom(*a, 1, -3.0f, 3.0f));
      FERRY_ASSERT_OK(FillRandom(*b, 2, 0.5f, 2.0f));
      FERRY_ASSERT_OK(FillRandom(*pos, 3, 0.0f, 50.0f));
      KernelRunner runner(nth);
      FERRY_ASSERT_OK(runner.Run({out}));
      FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> want, ReadTensor(*out));
      out->data = a->data;
      FERRY_ASSERT_OK(runner.Run({out}));
      FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> got, ReadTensor(*out));
      EXPECT_EQ(got, want);
    }
  }
  for (int op = 0; op < kNumOps; ++op) {
    EXPECT_EQ(covered[op], OpCanRunInPlace(static_cast<Op>(op)))
        << OpName(static_cast<Op>(op));
  }
}

std::string PathName(const ::testing::TestParamInfo<Path>& info) {
  switch (info.param) {
    case Isa::kScalar:
      return "Portable";
    case Isa::kAvx2:
      return "Avx2";
    case Isa::kAvx512:
      return "Avx512";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelsTest,
                         ::testing::ValuesIn(SupportedPaths()), PathName);

// ---------------------------------------------------------------------------
// CheckSupported.

TEST(CheckSupportedTest, AcceptsLeafsAndViews) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {4, 3});
  FERRY_EXPECT_OK(CheckSupported(*a));
  FERRY_EXPECT_OK(CheckSupported(**Transpose(ctx, a)));
  FERRY_EXPECT_OK(CheckSupported(**Reshape(ctx, a, {12})));
}

TEST(CheckSupportedTest, RejectsMulMatWithI32A) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8, 2});
  Tensor node = **MulMat(ctx, a, b);
  FERRY_EXPECT_OK(CheckSupported(node));
  Tensor a_i32 = *a;
  a_i32.dtype = DType::kI32;
  node.src[0] = &a_i32;
  EXPECT_THAT(CheckSupported(node), StatusIs(absl::StatusCode::kUnimplemented,
                                             ::testing::HasSubstr("mul_mat")));
}

TEST(CheckSupportedTest, RejectsNonContiguousRows) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* b = *ctx.NewTensor(DType::kF32, {8, 2});
  Tensor node = **MulMat(ctx, a, b);
  Tensor* bt = *Transpose(ctx, *ctx.NewTensor(DType::kF32, {2, 8}));
  node.src[1] = bt;
  EXPECT_THAT(CheckSupported(node),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("contiguous rows")));

  Tensor silu = **Silu(ctx, a);
  Tensor* at = *Transpose(ctx, *ctx.NewTensor(DType::kF32, {4, 8}));
  silu.src[0] = at;
  EXPECT_THAT(CheckSupported(silu),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckSupportedTest, RejectsBadCombinations) {
  Context ctx;
  Tensor* f = *ctx.NewTensor(DType::kF32, {8, 4});
  Tensor* i = *ctx.NewTensor(DType::kI32, {8, 4});
  // cpy f32 -> i32 (ops.h refuses to build it; forge the node).
  Tensor cpy = **Cpy(ctx, f, *ctx.NewTensor(DType::kF32, {32}));
  cpy.src[1] = i;
  cpy.dtype = DType::kI32;
  cpy.ne = i->ne;
  cpy.nb = i->nb;
  EXPECT_THAT(CheckSupported(cpy), StatusIs(absl::StatusCode::kUnimplemented));
  // add with an f16 operand.
  Tensor add = **Add(ctx, f, f);
  Tensor* h = *ctx.NewTensor(DType::kF16, {8, 4});
  add.src[1] = h;
  EXPECT_THAT(CheckSupported(add), StatusIs(absl::StatusCode::kUnimplemented));
  // A non-contiguous result.
  Tensor relu = **Relu(ctx, f);
  relu.nb[1] *= 2;
  relu.nb[2] *= 2;
  relu.nb[3] *= 2;
  EXPECT_THAT(CheckSupported(relu),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Unknown rope mode and an op with no kernel.
  Tensor* pos = *ctx.NewTensor(DType::kI32, {1});
  Tensor rope = **Rope(ctx, f, pos, 8, RopeMode::kNormal);
  rope.SetParamI32(1, 1);
  EXPECT_THAT(CheckSupported(rope), StatusIs(absl::StatusCode::kUnimplemented));
  Tensor unknown = rope;
  unknown.op = static_cast<Op>(200);
  EXPECT_THAT(CheckSupported(unknown),
              StatusIs(absl::StatusCode::kUnimplemented));
  // Missing source.
  Tensor scale = **Scale(ctx, f, 2.0f);
  scale.src[0] = nullptr;
  EXPECT_THAT(CheckSupported(scale),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---------------------------------------------------------------------------
// Row primitives.

TEST(VecTest, ConversionsMatchDtypeHBitForBit) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.5f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e10f,
                               -1e10f,
                               6.1e-5f,
                               5.96e-8f,
                               2.98e-8f,
                               2.99e-8f,
                               1e-10f,
                               3.0e-5f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(9);
  for (int i = 0; i < 1000; ++i) {
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  }
  const int64_t n = static_cast<int64_t>(values.size());
  for (Path path : SupportedPaths()) {
    ForcePath(path);
    std::vector<Half> h(values.size());
    std::vector<BFloat16> bf(values.size());
    cpu_kernels_internal::ConvertRow(DType::kF32, values.data(), DType::kF16,
                                     h.data(), n);
    cpu_kernels_internal::ConvertRow(DType::kF32, values.data(), DType::kBF16,
                                     bf.data(), n);
    std::vector<float> from_h(values.size()), from_bf(values.size());
    cpu_kernels_internal::ConvertRow(DType::kF16, h.data(), DType::kF32,
                                     from_h.data(), n);
    cpu_kernels_internal::ConvertRow(DType::kBF16, bf.data(), DType::kF32,
                                     from_bf.data(), n);
    for (size_t i = 0; i < values.size(); ++i) {
      const float v = values[i];
      SCOPED_TRACE(absl::StrCat("value ", v, " path ", static_cast<int>(path)));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(F16ToF32(h[i])));
        EXPECT_TRUE(std::isnan(BF16ToF32(bf[i])));
        continue;
      }
      EXPECT_EQ(h[i].bits, F32ToF16(v).bits);
      EXPECT_EQ(bf[i].bits, F32ToBF16(v).bits);
      EXPECT_EQ(std::bit_cast<uint32_t>(from_h[i]),
                std::bit_cast<uint32_t>(F16ToF32(h[i])));
      EXPECT_EQ(std::bit_cast<uint32_t>(from_bf[i]),
                std::bit_cast<uint32_t>(BF16ToF32(bf[i])));
    }
  }
  ResetPath();
}

TEST(VecTest, FastExpIsAccurate) {
  for (Path path : SupportedPaths()) {
    ForcePath(path);
    std::vector<float> x;
    for (float v = -87.0f; v <= 88.5f; v += 0.0137f) x.push_back(v);
    std::vector<float> e = x;
    cpu_kernels_internal::ExpSubRow(e.data(), 0.0f,
                                    static_cast<int64_t>(e.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      EXPECT_NEAR(e[i] / want, 1.0, 1e-6)
          << x[i] << " path " << static_cast<int>(path);
      EXPECT_NEAR(cpu_kernels_internal::FastExp(x[i]) / want, 1.0, 1e-6)
          << x[i];
    }
  }
  ResetPath();
  EXPECT_EQ(cpu_kernels_internal::FastExp(-100.0f), 0.0f);
  EXPECT_EQ(cpu_kernels_internal::FastExp(100.0f),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(cpu_kernels_internal::FastExp(NAN)));
}

}  // namespace
}  // namespace ferry::cpu_kernels
