// A remote device answers SupportsOp as its worker's device would for the
// same node in the same memory: a source already in the worker's weights
// memory (the CPU's packed panels) is asked about where it is, so the
// answer is never "yes" for a node the worker then refuses to define.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/device.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using remote::testing::WorkerProcess;

// Nodes over a weight `w` of `device`'s weights memory (packed on a CPU)
// and activations `x` of its default memory, placed.
struct WeightNodes {
  Context ctx;
  std::vector<std::unique_ptr<Buffer>> buffers;
  Tensor* mul_mat = nullptr;       // mul_mat(w, x): reads the panels.
  Tensor* view_mul_mat = nullptr;  // mul_mat(view of w's rows, x).
  Tensor* add_weight = nullptr;    // w + w: an elementwise read of panels.
  Tensor* add_x = nullptr;         // x + x: plain memory only.
  Tensor* row_major_view_mul_mat = nullptr;  // As view_mul_mat, w row-major.
};

absl::StatusOr<std::unique_ptr<WeightNodes>> MakeNodes(Device& device) {
  auto n = std::make_unique<WeightNodes>();
  Context& ctx = n->ctx;
  constexpr int64_t kK = 64, kRows = 128, kN = 2;
  FERRY_ASSIGN_OR_RETURN(Tensor * w,
                         ctx.NewTensor(DType::kF32, {kK, kRows}, "w"));
  FERRY_ASSIGN_OR_RETURN(Tensor * plain_w,
                         ctx.NewTensor(DType::kF32, {kK, kRows}, "plain_w"));
  FERRY_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(DType::kF32, {kK, kN}, "x"));
  auto place = [&](BufferType& type, Tensor* t) -> absl::Status {
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> b,
                           type.Allocate(type.AllocSize(*t)));
    FERRY_RETURN_IF_ERROR(PlaceTensor(*b, *t, 0));
    n->buffers.push_back(std::move(b));
    return absl::OkStatus();
  };
  FERRY_RETURN_IF_ERROR(place(*device.weights_buffer_type(), w));
  FERRY_RETURN_IF_ERROR(place(*device.default_buffer_type(), plain_w));
  FERRY_RETURN_IF_ERROR(place(*device.default_buffer_type(), x));
  FERRY_ASSIGN_OR_RETURN(n->mul_mat, MulMat(ctx, w, x));
  FERRY_ASSIGN_OR_RETURN(Tensor * rows,
                         View2D(ctx, w, kK, kRows / 2, w->nb[1], 0));
  FERRY_RETURN_IF_ERROR(PlaceView(*rows));
  FERRY_ASSIGN_OR_RETURN(n->view_mul_mat, MulMat(ctx, rows, x));
  FERRY_ASSIGN_OR_RETURN(n->add_weight, Add(ctx, w, w));
  FERRY_ASSIGN_OR_RETURN(n->add_x, Add(ctx, x, x));
  FERRY_ASSIGN_OR_RETURN(Tensor * plain_rows,
                         View2D(ctx, plain_w, kK, kRows / 2, w->nb[1], 0));
  FERRY_RETURN_IF_ERROR(PlaceView(*plain_rows));
  FERRY_ASSIGN_OR_RETURN(n->row_major_view_mul_mat, MulMat(ctx, plain_rows, x));
  return n;
}

// `message` with its quoted names left out: tensors' names do not travel
// with definitions, nor views' sources' names at all.
std::string WithoutNames(absl::string_view message) {
  std::string out;
  bool quoted = false;
  for (char ch : message) {
    if (ch == '\'') {
      quoted = !quoted;
      out += ch;
    } else if (!quoted) {
      out += ch;
    }
  }
  return out;
}

TEST(RemoteSupportsOpTest, AnswersAsTheWorkersDeviceDoesForTheSameMemory) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto worker,
                             WorkerProcess::Start({"--devices=cpu"}));
  FERRY_ASSERT_OK_AND_ASSIGN(auto remote,
                             MakeRemoteDevice(worker->address() + "/cpu"));
  ASSERT_NE(remote->weights_buffer_type(), remote->default_buffer_type());
  Device& cpu = GetCpuDevice();
  FERRY_ASSERT_OK_AND_ASSIGN(auto local_nodes, MakeNodes(cpu));
  FERRY_ASSERT_OK_AND_ASSIGN(auto remote_nodes, MakeNodes(*remote));

  struct Case {
    const char* what;
    Tensor* WeightNodes::*node;
    bool supported;
  };
  const Case cases[] = {
      {"mul_mat of a packed weight", &WeightNodes::mul_mat, true},
      {"mul_mat of a view into a packed weight", &WeightNodes::view_mul_mat,
       false},
      {"add of a packed weight", &WeightNodes::add_weight, false},
      {"add of activations", &WeightNodes::add_x, true},
      {"mul_mat of a view into a row-major weight",
       &WeightNodes::row_major_view_mul_mat, true},
  };
  for (const Case& c : cases) {
    // Twice: the second answer comes from the device's cache.
    // A refusal carries the worker's reason: the local device's, word for
    // word, after the remote device's name.
    for (int round = 0; round < 2; ++round) {
      const absl::Status local = cpu.CheckOp(*(local_nodes.get()->*c.node));
      const absl::Status there =
          remote->CheckOp(*(remote_nodes.get()->*c.node));
      EXPECT_EQ(local.ok(), c.supported) << "local cpu: " << c.what;
      EXPECT_EQ(there.ok(), c.supported) << remote->name() << ": " << c.what;
      EXPECT_EQ(remote->SupportsOp(*(remote_nodes.get()->*c.node)),
                c.supported);
      if (c.supported) continue;
      EXPECT_EQ(there.code(), local.code()) << c.what;
      EXPECT_EQ(
          WithoutNames(there.message()),
          WithoutNames(absl::StrCat(remote->name(), ": ", local.message())))
          << c.what << ": " << there.message();
    }
  }

  // What it said yes to, the worker defines and runs; what it said no to
  // fails at once at its definition, before anything runs.
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, remote->CreateBackend("threads=1"));
  auto place_results = [&](const Graph& graph) -> absl::Status {
    for (Tensor* node : graph.nodes()) {
      if (node->data != nullptr) continue;
      FERRY_ASSIGN_OR_RETURN(
          auto b, remote->default_buffer_type()->Allocate(node->NumBytes()));
      FERRY_RETURN_IF_ERROR(PlaceTensor(*b, *node, 0));
      remote_nodes->buffers.push_back(std::move(b));
    }
    return absl::OkStatus();
  };
  FERRY_ASSERT_OK_AND_ASSIGN(Graph ok_graph,
                             Graph::Build({remote_nodes->add_x}));
  FERRY_ASSERT_OK(place_results(ok_graph));
  FERRY_EXPECT_OK(backend->Compute(ok_graph));
  FERRY_ASSERT_OK_AND_ASSIGN(Graph refused,
                             Graph::Build({remote_nodes->view_mul_mat}));
  FERRY_ASSERT_OK(place_results(refused));
  absl::Status status = backend->Compute(refused);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("does not support mul_mat"),
            std::string::npos)
      << status.message();
  // With the device's reason.
  const absl::Status why = cpu.CheckOp(*local_nodes->view_mul_mat);
  ASSERT_FALSE(why.ok());
  EXPECT_NE(WithoutNames(status.message()).find(WithoutNames(why.message())),
            std::string::npos)
      << status.message() << " lacks " << why.message();
}

}  // namespace
}  // namespace ferry
