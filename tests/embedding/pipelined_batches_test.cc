// The scheduler's public contract, tried from another workspace through the
// public headers only, as the issue that reworked it first found it broken:
// 16 coroutines started together with WhenAll, each setting the graph's own
// input and awaiting ComputeAsync, on simulated devices and the CPU; every
// batch must see its own input, and code after co_await must never run on a
// device's thread.
#include <cmath>
#include <vector>

#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/executor.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/when_all.h"
#include "ferry/sched/scheduler.h"
#include "gtest/gtest.h"

namespace {

ferry::Task<absl::Status> Batch(ferry::Scheduler* sched, const ferry::Graph* g,
                                ferry::Tensor* x, const ferry::Tensor* y,
                                float value, float* out, bool* on_device) {
  // Set the shared input, then await: the scheduler reads it at the call.
  std::vector<float> in(64, value);
  absl::Status status = ferry::SetTensorData(*x, in.data());
  if (!status.ok()) co_return status;
  status = co_await sched->ComputeAsync(
      *g, ferry::BatchIo().Out(*y, out, 64 * sizeof(float)));
  *on_device = ferry::IsDeviceThread();
  co_return status;
}

TEST(PipelinedBatchesTest, EveryCoroutineGetsItsOwnBatch) {
  ferry::Registry& registry = ferry::Registry::Global();
  ASSERT_TRUE(ferry::RegisterLinkedDevices(registry).ok());
  ferry::CreateBackendsOptions options;
  options.family_options["sim"] = "lat=1us";
  auto list = registry.CreateBackends("sim0,sim1,cpu", options);
  ASSERT_TRUE(list.ok()) << list.status();

  // y = relu(scale(x * x, 2)): x*x on sim0, scale on sim1, relu on the CPU.
  ferry::Context ctx;
  ferry::Tensor* x = *ctx.NewTensor(ferry::DType::kF32, {64}, "x");
  ferry::SetInput(*x);
  ferry::Tensor* sq = *ferry::Mul(ctx, x, x);
  ferry::Tensor* scaled = *ferry::Scale(ctx, sq, 2.0f);
  ferry::Tensor* y = *ferry::Relu(ctx, scaled);
  ferry::SetOutput(*y);
  ferry::Graph graph = *ferry::Graph::Build({y});

  auto sched = ferry::Scheduler::Create(list->backends, {.n_copies = 4});
  ASSERT_TRUE(sched.ok()) << sched.status();
  ASSERT_TRUE((*sched)->SetTensorBackend(*sq, *list->backends[0]).ok());
  ASSERT_TRUE((*sched)->SetTensorBackend(*scaled, *list->backends[1]).ok());
  ASSERT_TRUE((*sched)->SetTensorBackend(*y, *list->backends[2]).ok());
  ASSERT_TRUE((*sched)->AllocGraph(graph).ok());
  ASSERT_EQ((*sched)->num_splits(), 3) << (*sched)->DescribeSplits();

  constexpr int kBatches = 16;
  std::vector<std::vector<float>> out(kBatches, std::vector<float>(64, NAN));
  std::vector<char> on_device(kBatches, 1);
  std::vector<ferry::Task<absl::Status>> tasks;
  for (int k = 0; k < kBatches; ++k) {
    tasks.push_back(Batch(sched->get(), &graph, x, y, static_cast<float>(k),
                          out[k].data(),
                          reinterpret_cast<bool*>(&on_device[k])));
  }
  for (const absl::Status& status :
       ferry::SyncWait(ferry::WhenAll(std::move(tasks)))) {
    EXPECT_TRUE(status.ok()) << status;
  }
  for (int k = 0; k < kBatches; ++k) {
    EXPECT_EQ(out[k][0], 2.0f * k * k) << "batch " << k;
    EXPECT_FALSE(on_device[k]) << "batch " << k;
  }
}

}  // namespace
