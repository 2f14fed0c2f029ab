// Conformance: compute, and every op the device claims.
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/trace.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

// One op case: builds a small graph into a context; returns its output.
struct OpCase {
  std::string name;
  std::function<absl::StatusOr<Tensor*>(Context&)> build;
  double tolerance = 1e-9;  // NMSE.
};

absl::StatusOr<Tensor*> Leaf(Context& ctx, DType dtype,
                             std::initializer_list<int64_t> shape,
                             const char* name) {
  FERRY_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(dtype, shape, name));
  SetInput(*t);
  return t;
}

std::vector<OpCase> OpCases() {
  std::vector<OpCase> cases;
  auto binary = [](auto op) {
    return [op](Context& ctx) -> absl::StatusOr<Tensor*> {
      FERRY_ASSIGN_OR_RETURN(Tensor * a,
                             Leaf(ctx, DType::kF32, {33, 5, 2}, "a"));
      FERRY_ASSIGN_OR_RETURN(Tensor * b,
                             Leaf(ctx, DType::kF32, {33, 1, 2}, "b"));
      return op(ctx, a, b);
    };
  };
  cases.push_back({"add", binary(Add)});
  cases.push_back({"sub", binary(Sub)});
  cases.push_back({"mul", binary(Mul)});
  cases.push_back({"div", binary(Div)});
  auto unary = [](auto op) {
    return [op](Context& ctx) -> absl::StatusOr<Tensor*> {
      FERRY_ASSIGN_OR_RETURN(Tensor * a, Leaf(ctx, DType::kF32, {70, 3}, "a"));
      return op(ctx, a);
    };
  };
  cases.push_back({"silu", unary(Silu), 1e-9});
  cases.push_back({"gelu", unary(Gelu), 1e-9});
  cases.push_back({"relu", unary(Relu)});
  cases.push_back({"scale", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {64, 3}, "a"));
                     return Scale(ctx, a, -1.5f);
                   }});
  cases.push_back({"rms_norm", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {128, 4}, "a"));
                     return RmsNorm(ctx, a, 1e-5f);
                   }});
  cases.push_back({"norm", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {128, 4}, "a"));
                     return Norm(ctx, a, 1e-5f);
                   }});
  cases.push_back({"soft_max_mask",
                   [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {32, 8, 2}, "a"));
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * m, Leaf(ctx, DType::kF32, {32, 8}, "mask"));
                     return SoftMax(ctx, a, m, 0.125f);
                   },
                   1e-9});
  for (DType a_type : {DType::kF32, DType::kF16, DType::kBF16}) {
    cases.push_back({absl::StrCat("mul_mat_", DTypeName(a_type)),
                     [a_type](Context& ctx) -> absl::StatusOr<Tensor*> {
                       FERRY_ASSIGN_OR_RETURN(
                           Tensor * a, Leaf(ctx, a_type, {96, 17, 2}, "a"));
                       FERRY_ASSIGN_OR_RETURN(
                           Tensor * b, Leaf(ctx, DType::kF32, {96, 9, 4}, "b"));
                       return MulMat(ctx, a, b);
                     },
                     a_type == DType::kF32 ? 1e-8 : 1e-5});
  }
  cases.push_back({"mul_mat_permuted",
                   [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {32, 4, 6}, "a"));
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * b, Leaf(ctx, DType::kF32, {32, 6, 4}, "b"));
                     FERRY_ASSIGN_OR_RETURN(Tensor * ap,
                                            Permute(ctx, a, 0, 2, 1, 3));
                     return MulMat(ctx, ap, b);
                   },
                   1e-8});
  for (int mode : {0, 2}) {
    cases.push_back({absl::StrCat("rope_mode", mode),
                     [mode](Context& ctx) -> absl::StatusOr<Tensor*> {
                       FERRY_ASSIGN_OR_RETURN(
                           Tensor * a, Leaf(ctx, DType::kF32, {64, 4, 5}, "a"));
                       FERRY_ASSIGN_OR_RETURN(
                           Tensor * pos, Leaf(ctx, DType::kI32, {5}, "pos"));
                       return Rope(ctx, a, pos, 64, static_cast<RopeMode>(mode),
                                   10000.0f, 1.0f);
                     },
                     1e-9});
  }
  cases.push_back({"get_rows_f16", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF16, {40, 10}, "a"));
                     FERRY_ASSIGN_OR_RETURN(Tensor * ids,
                                            Leaf(ctx, DType::kI32, {6}, "ids"));
                     return GetRows(ctx, a, ids);
                   }});
  cases.push_back({"cpy_f32_f16", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {24, 3}, "a"));
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * b, Leaf(ctx, DType::kF16, {24, 3}, "b"));
                     return Cpy(ctx, a, b);
                   }});
  cases.push_back(
      {"cont_transposed", [](Context& ctx) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                Leaf(ctx, DType::kF32, {12, 7}, "a"));
         FERRY_ASSIGN_OR_RETURN(Tensor * t, Transpose(ctx, a));
         return Cont(ctx, t);
       }});
  cases.push_back({"concat", [](Context& ctx) -> absl::StatusOr<Tensor*> {
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * a, Leaf(ctx, DType::kF32, {8, 3}, "a"));
                     FERRY_ASSIGN_OR_RETURN(
                         Tensor * b, Leaf(ctx, DType::kF32, {8, 2}, "b"));
                     return Concat(ctx, a, b, 1);
                   }});
  cases.push_back(
      {"view_reshape_chain", [](Context& ctx) -> absl::StatusOr<Tensor*> {
         FERRY_ASSIGN_OR_RETURN(Tensor * a,
                                Leaf(ctx, DType::kF32, {16, 6}, "a"));
         FERRY_ASSIGN_OR_RETURN(Tensor * r, Reshape(ctx, a, {8, 12}));
         FERRY_ASSIGN_OR_RETURN(Tensor * v,
                                View2D(ctx, r, 8, 6, r->nb[1], r->nb[1] * 3));
         return Scale(ctx, v, 2.0f);
       }});
  return cases;
}

// Fills the leafs of a host-resident graph. get_rows ids and rope positions
// get valid integers.
absl::Status FillLeafs(const Graph& graph) {
  uint64_t seed = 1;
  for (Tensor* leaf : graph.leafs()) {
    if (leaf->dtype == DType::kI32) {
      FERRY_RETURN_IF_ERROR(FillRandom(*leaf, seed++, 0, 9));
    } else {
      FERRY_RETURN_IF_ERROR(FillRandom(*leaf, seed++, -1.0f, 1.0f));
    }
  }
  return absl::OkStatus();
}

// supports_op honesty: every op case the device claims must compute the
// reference's values, through the awaitable Compute path.
TEST_P(ComputeConformanceTest, EverySupportedOpMatchesTheReference) {
  int supported = 0;
  for (const OpCase& op_case : OpCases()) {
    SCOPED_TRACE(op_case.name);
    // Reference in host memory.
    Context ref_ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * ref_out, op_case.build(ref_ctx));
    FERRY_ASSERT_OK_AND_ASSIGN(Graph ref_graph, Graph::Build({ref_out}));
    FERRY_ASSERT_OK(ref_ctx.AllocateHostData());
    FERRY_ASSERT_OK(FillLeafs(ref_graph));

    // The same graph on the backend.
    Context ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * out, op_case.build(ctx));
    FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({out}));
    bool all_supported = true;
    for (Tensor* node : graph.nodes()) {
      all_supported = all_supported && backend().SupportsOp(*node);
    }
    if (!all_supported) continue;
    ++supported;
    Place(graph);
    ASSERT_EQ(graph.num_leafs(), ref_graph.num_leafs());
    for (int64_t i = 0; i < graph.num_leafs(); ++i) {
      Tensor* leaf = graph.leafs()[i];
      FERRY_ASSERT_OK(SetTensorData(*leaf, ref_graph.leafs()[i]->data));
    }
    FERRY_ASSERT_OK(EvaluateReference(ref_graph));
    FERRY_ASSERT_OK(SyncWait(backend().ComputeAsync(graph)));

    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> expected,
                               ReadTensor(*ref_out));
    // Download into a host tensor of the same layout, then read it.
    Context host_ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(
        Tensor * host,
        host_ctx.NewTensor(out->dtype,
                           {out->ne[0], out->ne[1], out->ne[2], out->ne[3]},
                           "host"));
    FERRY_ASSERT_OK(host_ctx.AllocateHostData());
    FERRY_ASSERT_OK(GetTensorData(*out, host->data));
    FERRY_ASSERT_OK_AND_ASSIGN(std::vector<float> actual, ReadTensor(*host));
    const double nmse = Nmse(expected, actual);
    EXPECT_LE(nmse, op_case.tolerance) << DumpText(graph);
  }
  EXPECT_GT(supported, 0) << "the backend claims no op at all";
  std::printf("%s: %d of %zu op cases supported and checked\n",
              GetParam().name.c_str(), supported, OpCases().size());
}

TEST_P(ComputeConformanceTest, ComputeAsyncAwaitsTheResult) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {500}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, -2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Relu(ctx_, y));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({z}));
  Place(graph);
  Write(*x, Iota(500, 1.0f, -250.0f));
  FERRY_ASSERT_OK(SyncWait(backend().ComputeAsync(graph)));
  const std::vector<float> out = Read(*z);
  for (int i = 0; i < 500; ++i) {
    ASSERT_EQ(out[i], std::max(0.0f, -2.0f * (i - 250.0f))) << i;
  }
}

TEST_P(ComputeConformanceTest, BlockingComputeIsDoneOnReturn) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Write(*x, Iota(64));
  FERRY_ASSERT_OK(backend().Compute(graph));
  EXPECT_EQ(Read(*y), Iota(64, 3.0f));
}

// engine_stats and ClockNanos are one clock: across a compute, no engine is
// busy longer than the device's clock advanced, and the compute engine (when
// the device keeps counters) counts the work.
TEST_P(ComputeConformanceTest, EngineBusyTimeFitsInTheDeviceClock) {
  const Device& device = backend().device();
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w,
                             ctx_.NewTensor(DType::kF32, {128, 128}, "w"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {128, 16}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, MulMat(ctx_, w, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, MulMat(ctx_, w, y));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({z}));
  Place(graph);
  Write(*w, Iota(128 * 128, 1e-4f));
  Write(*x, Iota(128 * 16, 1e-3f));
  const std::vector<DeviceCounters> before = device.engine_stats();
  const int64_t start = device.ClockNanos();
  FERRY_ASSERT_OK(backend().Compute(graph));
  const int64_t end = device.ClockNanos();
  const std::vector<DeviceCounters> after = device.engine_stats();
  ASSERT_GE(end, start);
  ASSERT_EQ(after.size(), before.size());
  int64_t ops = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i].name, before[i].name);
    EXPECT_LE(after[i].busy_ns - before[i].busy_ns, end - start)
        << after[i].name;
    ops += after[i].ops - before[i].ops;
  }
  if (!after.empty()) {
    EXPECT_GT(ops, 0);
  }
}

// With tracing on, every compute node is one span named NodeSpanName
// ("<op> <name>") on the device's tracks, whatever the backend: traces of
// different devices line up node for node. Views record nothing.
TEST_P(ComputeConformanceTest, TracingRecordsOneSpanPerComputeNode) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {64}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, x, 3.0f));
  y->name = "conformance_scaled";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v, Reshape(ctx_, y, {8, 8}));
  v->name = "conformance_view";
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Relu(ctx_, v));
  z->name = "conformance_clipped";
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({z}));
  Place(graph);
  Write(*x, Iota(64));
  TraceRecorder& trace = TraceRecorder::Global();
  trace.Clear();
  trace.SetEnabled(true);
  const absl::Status computed = backend().Compute(graph);
  trace.SetEnabled(false);
  FERRY_ASSERT_OK(computed);
  std::map<std::string, int> count;
  for (const TraceSpan& span : trace.Spans()) {
    if (absl::StrContains(span.name, "conformance_")) ++count[span.name];
  }
  trace.Clear();
  EXPECT_THAT(count, ::testing::UnorderedElementsAre(
                         ::testing::Pair(NodeSpanName(*y), 1),
                         ::testing::Pair(NodeSpanName(*z), 1)));
}

// A device's weights_buffer_type() may store tensors its own way (the CPU
// keeps matrices in its GEMM's panels): transfers still speak the logical
// bytes, any range, and mul_mat reads the weight where it is. A view into
// such a weight computes right or is refused, never read as if it were
// row-major.
TEST_P(ComputeConformanceTest, WeightsTypeKeepsLogicalBytesAndFeedsMulMat) {
  BufferType& type = *device().weights_buffer_type();
  EXPECT_TRUE(device().SupportsBufferType(&type)) << type.name();
  constexpr int64_t kK = 96, kN = 3;
  // Whole panels of 64 rows, and a last panel padded (520 rows).
  for (const int64_t rows : {int64_t{128}, int64_t{520}}) {
    SCOPED_TRACE(rows);
    Context ctx;
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * w,
                               ctx.NewTensor(DType::kF32, {kK, rows}, "w"));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                               ctx.NewTensor(DType::kF32, {kK, kN}, "x"));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, MulMat(ctx, w, x));
    // Rows 32..95 of w: not where a panel starts.
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v,
                               View2D(ctx, w, kK, 64, w->nb[1], 32 * w->nb[1]));
    FERRY_ASSERT_OK_AND_ASSIGN(Tensor * yv, MulMat(ctx, v, x));
    const size_t size = type.AllocSize(*w);
    EXPECT_GE(size, static_cast<size_t>(w->NumBytes()));
    FERRY_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Buffer> buffer,
                               type.Allocate(size));
    buffer->set_usage(BufferUsage::kWeights);
    FERRY_ASSERT_OK(PlaceTensor(*buffer, *w, 0));
    buffers_.push_back(std::move(buffer));

    // Written in two ranges split inside an element, read back whole and
    // in a window that starts and ends inside elements.
    std::vector<float> weights(kK * rows);
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
    }
    const char* bytes = reinterpret_cast<const char*>(weights.data());
    const size_t total = weights.size() * 4, split = 4 * 1000 + 2;
    FERRY_ASSERT_OK(SetTensorData(*w, bytes, 0, split));
    FERRY_ASSERT_OK(SetTensorData(*w, bytes + split, split, total - split));
    EXPECT_EQ(Read(*w), weights);
    std::string window(333, '\0');
    FERRY_ASSERT_OK(GetTensorData(*w, window.data(), 4 * 700 + 2, 333));
    EXPECT_EQ(window, std::string(bytes + 4 * 700 + 2, 333));

    FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
    Place(graph);
    const std::vector<float> input = Iota(kK * kN, 0.03f, -1.0f);
    Write(*x, input);
    FERRY_ASSERT_OK(backend().Compute(graph));
    auto expect_product = [&](const std::vector<float>& out, int64_t first,
                              int64_t count) {
      for (int64_t j = 0; j < kN; ++j) {
        for (int64_t m = 0; m < count; ++m) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < kK; ++k) {
            const double term =
                static_cast<double>(weights[(first + m) * kK + k]) *
                input[j * kK + k];
            sum += term;
            magnitude += std::abs(term);
          }
          const double got = out[j * count + m];
          // NaN fails: the comparison is false.
          ASSERT_TRUE(std::abs(got - sum) <= 1e-5 * magnitude + 1e-6)
              << "row " << first + m << " column " << j << ": " << got << " vs "
              << sum;
        }
      }
    };
    expect_product(Read(*y), 0, rows);

    FERRY_ASSERT_OK_AND_ASSIGN(Graph view_graph, Graph::Build({yv}));
    Place(view_graph);
    Write(*x, input);
    absl::Status computed =
        backend().SupportsOp(*yv)
            ? backend().Compute(view_graph)
            : absl::UnimplementedError("refused by SupportsOp");
    if (computed.ok()) {
      expect_product(Read(*yv), 32, 64);
    } else {
      std::printf("%s: mul_mat of a view into a %s weight refused: %s\n",
                  GetParam().name.c_str(), std::string(type.name()).c_str(),
                  std::string(computed.message()).c_str());
      (void)backend().Synchronize();  // A failed run leaves it usable.
    }
  }
}

TEST_P(ComputeConformanceTest, AnEmptySpanIsFine) {
  FERRY_ASSERT_OK(backend().EnqueueCompute({}));
  FERRY_ASSERT_OK(backend().Record().WaitBlocking());
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(ComputeConformanceTest, LeafsAndViewsInTheSpanAreSkipped) {
  // graph.nodes() holds reshape and view nodes; passing every tensor,
  // leafs included, computes the same.
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx_.NewTensor(DType::kF32, {6, 4}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * r, Reshape(ctx_, x, {4, 6}));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * v,
                             View2D(ctx_, r, 4, 3, r->nb[1], r->nb[1] * 3));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx_, v, 0.5f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  Place(graph);
  Write(*x, Iota(24));
  std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
  all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
  FERRY_ASSERT_OK(backend().EnqueueCompute(all));
  FERRY_ASSERT_OK(backend().Synchronize());
  const std::vector<float> out = Read(*y);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(out[i], (12 + i) * 0.5f) << i;
}

}  // namespace
}  // namespace ferry::testing
