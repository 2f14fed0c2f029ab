#include "ferry/backends/cpu/cpu_backend.h"

#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "ferry/backends/buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_macros.h"
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

TEST(CpuDeviceTest, WeightsBufferTypeIsPackedAndUsable) {
  CpuDevice& device = GetCpuDevice();
  BufferType* weights = device.weights_buffer_type();
  ASSERT_NE(weights, nullptr);
  EXPECT_NE(weights, device.default_buffer_type());
  EXPECT_EQ(weights->name(), "cpu_packed");
  EXPECT_EQ(weights->device(), &device);
  EXPECT_FALSE(weights->is_host());  // Its bytes are not row-major.
  EXPECT_TRUE(device.SupportsBufferType(weights));
}

// Places `t` alone in a new buffer of `type`.
std::unique_ptr<Buffer> PlaceAlone(BufferType& type, Tensor& t) {
  auto buffer = *type.Allocate(type.AllocSize(t));
  FERRY_CHECK(PlaceTensor(*buffer, t, 0).ok());
  return buffer;
}

// A copy whose source is the tensor's own memory, overlapping it (what a
// remote worker's copy between two views of one buffer does): memmove
// semantics (ASan flags a memcpy of overlapping ranges).
TEST(CpuBackendTest, SetAndGetFromOverlappingMemory) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend, GetCpuDevice().CreateBackend());
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {64}, "t");
  std::vector<std::unique_ptr<Buffer>> buffers;
  buffers.push_back(PlaceAlone(*GetCpuDevice().default_buffer_type(), *t));
  float* v = static_cast<float*>(t->data);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>(i);
  // Elements 4..35 onto 0..31, then 0..31 back onto 2..33.
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*t, v + 4, 0, 32 * sizeof(float)));
  FERRY_ASSERT_OK(backend->Synchronize());
  for (int i = 0; i < 32; ++i) ASSERT_EQ(v[i], i + 4) << i;
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(*t, v + 2, 0, 32 * sizeof(float)));
  FERRY_ASSERT_OK(backend->Synchronize());
  for (int i = 0; i < 32; ++i) ASSERT_EQ(v[i + 2], i + 4) << i;
}

TEST(CpuBackendTest, ComputesWithPackedWeightsAndCopiesThemAsync) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend,
                             GetCpuDevice().CreateBackend("threads=2"));
  CpuDevice& device = GetCpuDevice();
  Context ctx;
  Tensor* w_plain = *ctx.NewTensor(DType::kF16, {48, 128}, "w_plain");
  Tensor* w = *ctx.NewTensor(DType::kF16, {48, 128}, "w");
  Tensor* x = *ctx.NewTensor(DType::kF32, {48, 5}, "x");
  Tensor* y_plain = *MulMat(ctx, w_plain, x);
  Tensor* y = *MulMat(ctx, w, x);
  Tensor* bad = *Cont(ctx, w);
  std::vector<std::unique_ptr<Buffer>> buffers;
  buffers.push_back(PlaceAlone(*device.weights_buffer_type(), *w));
  for (Tensor* t : {w_plain, x, y_plain, y, bad}) {
    buffers.push_back(PlaceAlone(*device.default_buffer_type(), *t));
  }
  std::vector<Half> values(48 * 128);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = F32ToF16(static_cast<float>(i % 97) / 97.0f - 0.5f);
  }
  std::vector<float> xs(48 * 5);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7);
  // The async forms pack and unpack on the stream, in order.
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*w, values.data(), 0,
                                            values.size() * sizeof(Half)));
  std::vector<Half> back(values.size());
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(*w, back.data(), 0,
                                            back.size() * sizeof(Half)));
  FERRY_ASSERT_OK(backend->Synchronize());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(back[i].bits, values[i].bits) << i;
  }
  FERRY_ASSERT_OK(SetTensorData(*w_plain, values.data()));
  FERRY_ASSERT_OK(SetTensorData(*x, xs.data()));
  Tensor* const nodes[] = {y_plain, y};
  FERRY_ASSERT_OK(backend->Compute(nodes));
  std::vector<float> want(128 * 5), got(128 * 5);
  FERRY_ASSERT_OK(GetTensorData(*y_plain, want.data()));
  FERRY_ASSERT_OK(GetTensorData(*y, got.data()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
  }
  // An op that would read the panels as rows is refused up front.
  EXPECT_FALSE(device.SupportsOp(*bad));
  Tensor* const bad_nodes[] = {bad};
  EXPECT_THAT(backend->EnqueueCompute(bad_nodes),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("'w'")));
}

}  // namespace
}  // namespace ferry
