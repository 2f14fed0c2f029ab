#include "ferry/backends/cpu/cpu_backend.h"

#include <atomic>
#include <vector>

#include "ferry/backends/buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CpuDeviceTest, RegisteredWithPropsAndCaps) {
  Registry registry;
  EXPECT_THAT(registry.FindDevice("cpu"),
              StatusIs(absl::StatusCode::kNotFound));  // Not before asked.
  FERRY_ASSERT_OK(RegisterCpuDevice(registry));
  FERRY_ASSERT_OK(RegisterCpuDevice(registry));  // Idempotent.
  FERRY_ASSERT_OK_AND_ASSIGN(Device * device, registry.FindDevice("cpu"));
  EXPECT_EQ(device, &GetCpuDevice());
  const DeviceProps props = device->props();
  EXPECT_EQ(props.type, DeviceType::kCpu);
  EXPECT_GT(props.memory_total, 0u);
  EXPECT_TRUE(props.caps.async);
  EXPECT_TRUE(device->default_buffer_type()->is_host());
  EXPECT_EQ(device->default_buffer_type()->alignment(), 64u);
  EXPECT_TRUE(device->SupportsBufferType(device->default_buffer_type()));
  // A second "cpu" is refused.
  EXPECT_THAT(registry.RegisterDevice(std::make_unique<CpuDevice>()),
              StatusIs(absl::StatusCode::kAlreadyExists));
  // A program that registered its own "cpu" first gets a clear error, and
  // no second CPU device is made.
  Registry other;
  FERRY_ASSERT_OK(other.RegisterDevice(std::make_unique<CpuDevice>()));
  EXPECT_THAT(RegisterCpuDevice(other),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(CpuDeviceTest, BackendParameters) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend,
                             GetCpuDevice().CreateBackend("threads=3"));
  EXPECT_EQ(static_cast<CpuBackend*>(backend.get())->threads(), 3);
  EXPECT_THAT(
      GetCpuDevice().CreateBackend("threads=0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("threads=0")));
  EXPECT_THAT(
      GetCpuDevice().CreateBackend("cores=2"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cores=2")));
}

TEST(CpuBackendTest, AbortCallbackStopsTheGraph) {
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto created, CpuBackend::Create(GetCpuDevice(), {.threads = 2}));
  CpuBackend& backend = *created;
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * x, ctx.NewTensor(DType::kF32, {64}, "x"));
  Tensor* y = x;
  for (int i = 0; i < 10; ++i) {
    FERRY_ASSERT_OK_AND_ASSIGN(y, Scale(ctx, y, 2.0f));
  }
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({y}));
  FERRY_ASSERT_OK(ctx.AllocateHostData());
  // AllocateHostData gives host memory but no buffer: wrap it for the check.
  std::atomic<int> calls{0};
  backend.SetAbortCallback([&] { return ++calls >= 3; });
  FERRY_ASSERT_OK(backend.EnqueueCompute(graph.nodes()));
  EXPECT_THAT(backend.Synchronize(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(calls.load(), 3);
  // Usable again, and without the callback it runs to the end.
  backend.SetAbortCallback(nullptr);
  FERRY_EXPECT_OK(backend.Compute(graph.nodes()));
}

}  // namespace
}  // namespace ferry
