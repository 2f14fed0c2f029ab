#include "ferry/tests/conformance/backend_conformance.h"

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

using ::testing::HasSubstr;

// Places every leaf and node of `graph` (views at their sources) in one
// buffer of `type`, which the returned pointer owns.
absl::StatusOr<std::unique_ptr<Buffer>> PlaceGraph(const Graph& graph,
                                                   BufferType& type) {
  const size_t align = type.alignment();
  auto round = [align](size_t n) { return (n + align - 1) / align * align; };
  size_t total = 0;
  std::vector<Tensor*> owners;
  for (auto list : {graph.leafs(), graph.nodes()}) {
    for (Tensor* t : list) {
      if (t->view_src != nullptr || t->buffer != nullptr) continue;
      owners.push_back(t);
      total += round(type.AllocSize(*t));
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                         type.Allocate(std::max<size_t>(total, 1)));
  size_t offset = 0;
  for (Tensor* t : owners) {
    FERRY_RETURN_IF_ERROR(PlaceTensor(*buffer, *t, offset));
    offset += round(type.AllocSize(*t));
  }
  for (auto list : {graph.leafs(), graph.nodes()}) {
    for (Tensor* t : list) {
      if (t->view_src != nullptr && t->buffer == nullptr) {
        FERRY_RETURN_IF_ERROR(PlaceView(*t));
      }
    }
  }
  return buffer;
}

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

Task<absl::Status> AwaitEvent(Event event) { co_return co_await event; }

void BackendConformanceTestSetUpImpl(const BackendFactory& factory,
                                     std::unique_ptr<Backend>& backend) {
  absl::StatusOr<std::unique_ptr<Backend>> created = factory.create();
  if (absl::IsUnavailable(created.status())) {
    GTEST_SKIP() << factory.name << " unavailable: " << created.status();
  }
  ASSERT_THAT(created, IsOk());
  backend = std::move(*created);
}

}  // namespace

void BackendConformanceTest::SetUp() {
  BackendConformanceTestSetUpImpl(GetParam(), backend_);
}

TEST_P(BackendConformanceTest, SetGetRoundTrip) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t,
                             ctx.NewTensor(DType::kF32, {1000}, "t"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             backend_->default_buffer_type()->Allocate(4096));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  std::vector<float> in(1000), out(1000, -1);
  for (int i = 0; i < 1000; ++i) in[i] = i * 0.5f;
  // Synchronous forms.
  FERRY_ASSERT_OK(SetTensorData(*t, in.data()));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(in, out);
  // Async forms, partial ranges, ordered on the stream.
  std::vector<float> twice(1000);
  for (int i = 0; i < 1000; ++i) twice[i] = i * 2.0f;
  FERRY_ASSERT_OK(backend_->EnqueueSetTensor(*t, twice.data(), 400, 400));
  std::vector<float> back(1000, -1);
  FERRY_ASSERT_OK(backend_->EnqueueGetTensor(*t, back.data(), 0, 4000));
  FERRY_ASSERT_OK(backend_->Synchronize());
  for (int i = 0; i < 1000; ++i) {
    const float expected = (i >= 100 && i < 200) ? twice[i - 100] : in[i];
    ASSERT_EQ(back[i], expected) << i;
  }
  FERRY_ASSERT_OK(buffer->MemsetTensor(*t, 0, 0, 4000));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(out[999], 0.0f);
}

TEST_P(BackendConformanceTest, OutOfRangeTransfersAreErrors) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, ctx.NewTensor(DType::kF32, {16}, "t"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             backend_->default_buffer_type()->Allocate(64));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  std::vector<float> data(32);
  EXPECT_FALSE(backend_->EnqueueSetTensor(*t, data.data(), 32, 64).ok());
  EXPECT_FALSE(backend_->EnqueueGetTensor(*t, data.data(), 0, 65).ok());
  FERRY_EXPECT_OK(backend_->Synchronize());
}

TEST_P(BackendConformanceTest, CopyToAndFromTheCpu) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto cpu,
                             GetCpuDevice().CreateBackend("threads=1"));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * host,
                             ctx.NewTensor(DType::kF32, {256}, "host"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * dev,
                             ctx.NewTensor(DType::kF32, {256}, "dev"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * back,
                             ctx.NewTensor(DType::kF32, {256}, "back"));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host_buffer,
                             cpu->default_buffer_type()->Allocate(2048));
  FERRY_ASSERT_OK_AND_ASSIGN(auto dev_buffer,
                             backend_->default_buffer_type()->Allocate(1024));
  FERRY_ASSERT_OK(PlaceTensor(*host_buffer, *host, 0));
  FERRY_ASSERT_OK(PlaceTensor(*host_buffer, *back, 1024));
  FERRY_ASSERT_OK(PlaceTensor(*dev_buffer, *dev, 0));
  std::vector<float> values(256);
  for (int i = 0; i < 256; ++i) values[i] = static_cast<float>(i * i);
  FERRY_ASSERT_OK(SetTensorData(*host, values.data()));
  // host -> device on this backend, then device -> host on the CPU stream.
  absl::Status up = backend_->EnqueueCopyTensor(*cpu, *host, *dev);
  if (absl::IsUnimplemented(up)) {
    FERRY_ASSERT_OK(cpu->Synchronize());
    FERRY_ASSERT_OK(CopyTensor(*host, *dev));
  } else {
    FERRY_ASSERT_OK(up);
  }
  absl::Status down = cpu->EnqueueCopyTensor(*backend_, *dev, *back);
  if (absl::IsUnimplemented(down)) {
    FERRY_ASSERT_OK(backend_->Synchronize());
    FERRY_ASSERT_OK(CopyTensor(*dev, *back));
  } else {
    FERRY_ASSERT_OK(down);
  }
  FERRY_ASSERT_OK(cpu->Synchronize());
  std::vector<float> out(256);
  FERRY_ASSERT_OK(GetTensorData(*back, out.data()));
  EXPECT_EQ(out, values);
}

TEST_P(BackendConformanceTest, EventsOrderWorkAcrossBackends) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto cpu,
                             GetCpuDevice().CreateBackend("threads=1"));
  // y = 3x on this backend; then, on the CPU stream, z = 2 * copy(y).
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x,
                             ctx.NewTensor(DType::kF32, {4096}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Scale(ctx, x, 3.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto buffer, PlaceGraph(graph, *backend_->default_buffer_type()));
  Context host_ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y_host,
                             host_ctx.NewTensor(DType::kF32, {4096}, "y_host"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * z, Scale(host_ctx, y_host, 2.0f));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph host_graph, Graph::Build({z}));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto host_buffer, PlaceGraph(host_graph, *cpu->default_buffer_type()));

  std::vector<float> in(4096, 2.0f), out(4096, 0.0f);
  FERRY_ASSERT_OK(backend_->EnqueueSetTensor(*x, in.data(), 0, in.size() * 4));
  FERRY_ASSERT_OK(backend_->EnqueueCompute(graph.nodes()));
  Event computed = backend_->Record();
  // The CPU stream must wait (device-side) for the compute before copying.
  absl::Status copy = cpu->EnqueueCopyTensor(*backend_, *y, *y_host);
  if (absl::IsUnimplemented(copy)) {
    FERRY_ASSERT_OK(cpu->EnqueueWait(computed));
    FERRY_ASSERT_OK(SyncWait(AwaitEvent(computed)));
    FERRY_ASSERT_OK(CopyTensor(*y, *y_host));
  } else {
    FERRY_ASSERT_OK(copy);
  }
  FERRY_ASSERT_OK(cpu->EnqueueCompute(host_graph.nodes()));
  FERRY_ASSERT_OK(cpu->EnqueueGetTensor(*z, out.data(), 0, out.size() * 4));
  FERRY_ASSERT_OK(SyncWait(AwaitEvent(cpu->Record())));
  EXPECT_TRUE(computed.IsComplete());
  for (float v : out) ASSERT_EQ(v, 12.0f);
  FERRY_EXPECT_OK(backend_->Synchronize());
}

TEST_P(BackendConformanceTest, ComputeOfUnplacedGraphIsAnError) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {8}, "x"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * y, Relu(ctx, x));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  EXPECT_FALSE(backend_->EnqueueCompute(graph.nodes()).ok());
  FERRY_EXPECT_OK(backend_->Synchronize());
}

// supports_op honesty: every op case the device claims must compute the
// reference's values, through the awaitable Compute path.
TEST_P(BackendConformanceTest, EverySupportedOpMatchesTheReference) {
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
      all_supported = all_supported && backend_->SupportsOp(*node);
    }
    if (!all_supported) continue;
    ++supported;
    FERRY_ASSERT_OK_AND_ASSIGN(
        auto buffer, PlaceGraph(graph, *backend_->default_buffer_type()));
    ASSERT_EQ(graph.num_leafs(), ref_graph.num_leafs());
    for (int64_t i = 0; i < graph.num_leafs(); ++i) {
      Tensor* leaf = graph.leafs()[i];
      FERRY_ASSERT_OK(SetTensorData(*leaf, ref_graph.leafs()[i]->data));
    }
    FERRY_ASSERT_OK(EvaluateReference(ref_graph));
    FERRY_ASSERT_OK(SyncWait(backend_->ComputeAsync(graph)));

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

}  // namespace ferry::testing
