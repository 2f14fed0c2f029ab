// Tests of the simulated device: memory, streams, events, the time model,
// pinned and pageable transfers, faults, device-to-device copies and trace.
// Time assertions use the modelled clock (exact), never host wall time;
// where real completion order is checked, the model gives a wide margin.
#include "ferry/backends/sim/internal/sim_backend.h"

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/sim/sim_config.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/backends/sim/sim_stats.h"
#include "ferry/backends/sim/sim_testing.h"
#include "ferry/graph/context.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/op_cost.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/testing/reference.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

int64_t CopyNs(const SimConfig& config, size_t bytes, double bw) {
  return config.latency_ns + static_cast<int64_t>(std::llround(
                                 static_cast<double>(bytes) * 1e9 / bw));
}

std::unique_ptr<SimDevice> MakeDevice(absl::string_view config,
                                      std::string name = "simtest") {
  auto device = SimDevice::Create(std::move(name), config);
  FERRY_CHECK(device.ok());
  return *std::move(device);
}

std::unique_ptr<Backend> MakeBackend(SimDevice& device) {
  auto backend = device.CreateBackend();
  FERRY_CHECK(backend.ok());
  return *std::move(backend);
}

// Places every tensor of `ctx` (views at their sources) in one new buffer of
// `type`.
absl::StatusOr<std::unique_ptr<Buffer>> AllocateAll(Context& ctx,
                                                    BufferType& type) {
  const size_t align = type.alignment();
  auto round = [align](size_t n) { return (n + align - 1) / align * align; };
  size_t total = 0;
  for (Tensor* t : ctx.tensors()) {
    if (t->view_src == nullptr && t->buffer == nullptr) {
      total = round(total) + type.AllocSize(*t);
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer, type.Allocate(total));
  size_t offset = 0;
  for (Tensor* t : ctx.tensors()) {
    if (t->view_src == nullptr && t->buffer == nullptr) {
      offset = round(offset);
      FERRY_RETURN_IF_ERROR(PlaceTensor(*buffer, *t, offset));
      offset += type.AllocSize(*t);
    }
  }
  for (Tensor* t : ctx.tensors()) {
    if (t->view_src != nullptr && t->buffer == nullptr) {
      FERRY_RETURN_IF_ERROR(PlaceView(*t));
    }
  }
  return buffer;
}

// A small transformer-ish graph: out = silu(softmax(rms_norm(w x + b))) * 2.
struct SmallGraph {
  Tensor* x;
  Tensor* w;
  Tensor* b;
  Tensor* out;
};

SmallGraph BuildSmallGraph(Context& ctx) {
  SmallGraph g;
  g.w = *ctx.NewTensor(DType::kF32, {64, 48}, "w");
  g.x = *ctx.NewTensor(DType::kF32, {64, 5}, "x");
  g.b = *ctx.NewTensor(DType::kF32, {48, 1}, "b");
  Tensor* y = *MulMat(ctx, g.w, g.x);
  y = *Add(ctx, y, g.b);
  y = *RmsNorm(ctx, y, 1e-5f);
  y = *SoftMax(ctx, y, nullptr, 0.5f);
  y = *Silu(ctx, y);
  g.out = *Scale(ctx, y, 2.0f);
  g.out->name = "out";
  return g;
}

std::vector<float> HostValues(const Tensor& t) {
  return *ferry::testing::ReadTensor(t);
}

// ---------------------------------------------------------------------------
// Device, registry, memory.

TEST(SimDeviceTest, RegistryMakesNumberedDevices) {
  Registry registry;
  FERRY_ASSERT_OK(RegisterSimFamily(registry));
  FERRY_ASSERT_OK_AND_ASSIGN(Device * first,
                             registry.AddDevice("sim", "mem=1GiB"));
  FERRY_ASSERT_OK_AND_ASSIGN(Device * second,
                             registry.AddDevice("sim", "sim:mem=2GiB"));
  EXPECT_EQ(first->name(), "sim0");
  EXPECT_EQ(second->name(), "sim1");
  FERRY_ASSERT_OK_AND_ASSIGN(Device * found,
                             registry.FindDevice(second->name()));
  EXPECT_EQ(found, second);
  DeviceProps props = second->props();
  EXPECT_EQ(props.type, DeviceType::kAccel);
  EXPECT_EQ(props.memory_total, size_t{2} << 30);
  EXPECT_EQ(props.memory_free, size_t{2} << 30);
  EXPECT_TRUE(props.caps.async);
  EXPECT_TRUE(props.caps.host_buffer);
  EXPECT_TRUE(props.caps.events);
  EXPECT_THAT(props.description, HasSubstr("simulated"));

  EXPECT_THAT(registry.AddDevice("sim", "flops=abc"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sim config 'flops=abc'")));
  // The failed factory call used up no name.
  FERRY_ASSERT_OK_AND_ASSIGN(Device * third, registry.AddDevice("sim"));
  EXPECT_EQ(third->name(), "sim2");
  FERRY_ASSERT_OK_AND_ASSIGN(auto backend,
                             registry.CreateBackend(first->name()));
  EXPECT_EQ(backend->name(), first->name());
  EXPECT_THAT(first->CreateBackend("threads=2"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SimDeviceTest, BufferTypes) {
  auto device = MakeDevice("");
  BufferType* memory = device->default_buffer_type();
  BufferType* pinned = device->host_buffer_type();
  ASSERT_NE(pinned, nullptr);
  EXPECT_FALSE(memory->is_host());
  EXPECT_TRUE(pinned->is_host());
  EXPECT_EQ(memory->device(), device.get());
  EXPECT_EQ(memory->alignment(), 256u);
  EXPECT_TRUE(device->SupportsBufferType(memory));
  EXPECT_FALSE(device->SupportsBufferType(pinned));
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, memory->Allocate(1000));
  EXPECT_FALSE(buffer->is_host());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->base()) % 256, 0u);
  FERRY_ASSERT_OK_AND_ASSIGN(auto host, pinned->Allocate(1000));
  EXPECT_TRUE(host->is_host());
  std::memset(host->base(), 1, 1000);  // Host memory: usable directly.
}

TEST(SimDeviceTest, MemoryLimit) {
  auto device = MakeDevice("mem=1MiB,max_alloc=768KiB");
  BufferType* type = device->default_buffer_type();
  EXPECT_EQ(type->max_size(), 768u << 10);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, type->Allocate(768 << 10));
  EXPECT_EQ(device->props().memory_free, 256u << 10);
  EXPECT_THAT(type->Allocate(512 << 10),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("out of device memory")));
  EXPECT_THAT(type->Allocate(800 << 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the maximum")));
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, type->Allocate(256 << 10));
  EXPECT_EQ(device->memory_used(), 1u << 20);
  a.reset();
  EXPECT_EQ(device->memory_used(), 256u << 10);
  FERRY_ASSERT_OK_AND_ASSIGN(auto c, type->Allocate(512 << 10));
  FERRY_ASSERT_OK_AND_ASSIGN(auto empty, type->Allocate(0));
}

TEST(SimDeviceTest, LargeAllocationsAreNotReserved) {
  auto device = MakeDevice("mem=64GiB");
  // Accounted against `mem`, but host memory is only touched when written.
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto buffer, device->default_buffer_type()->Allocate(size_t{16} << 30));
  EXPECT_EQ(device->props().memory_free, size_t{48} << 30);
}

TEST(SimDeviceDeathTest, HostAccessToDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto device = MakeDevice("guard=on");
  ASSERT_TRUE(device->guarded());
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             device->default_buffer_type()->Allocate(4096));
  volatile char* p = static_cast<volatile char*>(buffer->base());
  EXPECT_DEATH({ p[10] = 1; }, "");
  EXPECT_DEATH({ [[maybe_unused]] char c = p[100]; }, "");
  // The engines still reach it.
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {16}, "t");
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  std::vector<float> in(16, 3.0f), out(16);
  FERRY_ASSERT_OK(SetTensorData(*t, in.data()));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(out, in);
}

TEST(SimDeviceTest, SynchronousBufferOperations) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {100}, "a");
  Tensor* b = *ctx.NewTensor(DType::kF32, {100}, "b");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  std::vector<float> in(100);
  std::iota(in.begin(), in.end(), 0.0f);
  FERRY_ASSERT_OK(SetTensorData(*a, in.data()));
  FERRY_ASSERT_OK(CopyTensor(*a, *b));
  std::vector<float> out(100);
  FERRY_ASSERT_OK(GetTensorData(*b, out.data()));
  EXPECT_EQ(out, in);
  FERRY_ASSERT_OK(buffer->MemsetTensor(*b, 0, 0, 40));
  FERRY_ASSERT_OK(GetTensorData(*b, out.data()));
  EXPECT_EQ(out[9], 0.0f);
  EXPECT_EQ(out[10], 10.0f);
  FERRY_ASSERT_OK(buffer->Clear(0));
  FERRY_ASSERT_OK(GetTensorData(*a, out.data()));
  EXPECT_EQ(out, std::vector<float>(100, 0.0f));
  EXPECT_THAT(GetTensorData(*a, out.data(), 396, 8),
              StatusIs(absl::StatusCode::kOutOfRange));
}

// ---------------------------------------------------------------------------
// Compute.

TEST(SimBackendTest, ComputeMatchesReference) {
  Context host_ctx;
  SmallGraph host = BuildSmallGraph(host_ctx);
  FERRY_ASSERT_OK(host_ctx.AllocateHostData());
  FERRY_ASSERT_OK(ferry::testing::FillRandom(*host.x, 1));
  FERRY_ASSERT_OK(ferry::testing::FillRandom(*host.w, 2));
  FERRY_ASSERT_OK(ferry::testing::FillRandom(*host.b, 3));
  Tensor* host_out = host.out;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph host_graph, Graph::Build({&host_out, 1}));
  FERRY_ASSERT_OK(ferry::testing::EvaluateReference(host_graph));

  auto device = MakeDevice("");
  Context ctx;
  SmallGraph g = BuildSmallGraph(ctx);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  Tensor* out = g.out;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({&out, 1}));
  for (Tensor* node : graph.nodes()) EXPECT_TRUE(device->SupportsOp(*node));
  auto backend = MakeBackend(*device);
  FERRY_ASSERT_OK(
      backend->EnqueueSetTensor(*g.x, host.x->data, 0, host.x->NumBytes()));
  FERRY_ASSERT_OK(
      backend->EnqueueSetTensor(*g.w, host.w->data, 0, host.w->NumBytes()));
  FERRY_ASSERT_OK(
      backend->EnqueueSetTensor(*g.b, host.b->data, 0, host.b->NumBytes()));
  FERRY_ASSERT_OK(SyncWait(backend->ComputeAsync(graph)));
  std::vector<float> result(static_cast<size_t>(out->NumElements()));
  FERRY_ASSERT_OK(
      backend->EnqueueGetTensor(*out, result.data(), 0, out->NumBytes()));
  FERRY_ASSERT_OK(backend->Synchronize());
  const std::vector<float> expected = HostValues(*host_out);
  EXPECT_LT(ferry::testing::Nmse(expected, result), 1e-10);

  // The compute engine modelled each node by the roofline.
  const SimEngineStats stats = device->stats(SimEngineKind::kCompute);
  int64_t flops = 0;
  for (Tensor* node : graph.nodes()) flops += OpFlops(*node);
  EXPECT_EQ(stats.flops, flops);
  EXPECT_EQ(stats.spans, graph.num_nodes());
  EXPECT_GT(stats.busy_ns, 0);
}

TEST(SimBackendTest, NarrowedOpSetIsEnforced) {
  auto device = MakeDevice("ops=-soft_max");
  Context ctx;
  SmallGraph g = BuildSmallGraph(ctx);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  Tensor* out = g.out;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({&out, 1}));
  int unsupported = 0;
  for (Tensor* node : graph.nodes()) {
    if (!device->SupportsOp(*node)) {
      ++unsupported;
      EXPECT_EQ(node->op, Op::kSoftMax);
    }
  }
  EXPECT_EQ(unsupported, 1);
  auto backend = MakeBackend(*device);
  EXPECT_THAT(
      backend->EnqueueCompute(graph.nodes()),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("soft_max")));
}

TEST(SimBackendTest, RejectsTensorsOutsideItsMemory) {
  auto device = MakeDevice("");
  auto backend = MakeBackend(*device);
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {4}, "t");
  float data[4] = {};
  EXPECT_THAT(backend->EnqueueSetTensor(*t, data, 0, sizeof(data)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  FERRY_ASSERT_OK_AND_ASSIGN(auto pinned,
                             device->host_buffer_type()->Allocate(64));
  FERRY_ASSERT_OK(PlaceTensor(*pinned, *t, 0));
  EXPECT_THAT(
      backend->EnqueueSetTensor(*t, data, 0, sizeof(data)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not simtest's")));
  Tensor* y = *Scale(ctx, t, 2.0f);
  FERRY_ASSERT_OK(PlaceTensor(*pinned, *y, 0));
  EXPECT_THAT(backend->EnqueueCompute({&y, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---------------------------------------------------------------------------
// Streams and the time model.

TEST(SimBackendTest, StreamOrdersWorkAcrossEngines) {
  // Slow copies so that each step depends on the previous one's model time.
  auto device = MakeDevice("h2d=100MB/s,d2h=200MB/s,flops=1G,lat=10us");
  const SimConfig& config = device->config();
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {256, 64}, "x");
  Tensor* y = *Scale(ctx, x, 3.0f);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  const size_t bytes = static_cast<size_t>(x->NumBytes());
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(2 * bytes));
  float* in = static_cast<float*>(host->base());
  float* out = in + x->NumElements();
  for (int i = 0; i < x->NumElements(); ++i) in[i] = static_cast<float>(i);

  auto backend = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(backend->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*x, in, 0, bytes));
  Event uploaded = backend->Record();
  FERRY_ASSERT_OK(backend->EnqueueCompute({&y, 1}));
  Event computed = backend->Record();
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(*y, out, 0, bytes));
  Event downloaded = backend->Record();
  gate.Open();
  FERRY_ASSERT_OK(backend->Synchronize());
  for (int i = 0; i < x->NumElements(); ++i) {
    ASSERT_EQ(out[i], 3.0f * static_cast<float>(i)) << i;
  }

  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_up, SimDevice::EventTime(uploaded));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_comp, SimDevice::EventTime(computed));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_down, SimDevice::EventTime(downloaded));
  // Each step starts when the previous one completes by the model.
  const int64_t kernel_ns = static_cast<int64_t>(std::llround(
      std::max(OpFlops(*y) / config.flops, OpBytes(*y) / config.mem_bw) * 1e9));
  EXPECT_EQ(t_comp - t_up, kernel_ns);
  EXPECT_EQ(t_down - t_comp, CopyNs(config, bytes, config.d2h_bw));
  EXPECT_EQ(device->stats(SimEngineKind::kH2D).busy_ns,
            CopyNs(config, bytes, config.h2d_bw));
  EXPECT_EQ(device->stats(SimEngineKind::kH2D).bytes,
            static_cast<int64_t>(bytes));
  EXPECT_EQ(device->stats(SimEngineKind::kD2H).ops, 1);
}

TEST(SimBackendTest, CopyIssuedDuringLongKernelFinishesFirst) {
  // A kernel of 2*256*256*64 = 8.4 MFLOP at 40 MFLOP/s: 210 ms modelled.
  auto device = MakeDevice("flops=40M,h2d=25GB/s,lat=10us");
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {256, 256}, "a");
  Tensor* b = *ctx.NewTensor(DType::kF32, {256, 64}, "b");
  Tensor* c = *MulMat(ctx, a, b);
  Tensor* d = *ctx.NewTensor(DType::kF32, {16384}, "d");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(65536));
  std::memset(host->base(), 0, 65536);

  auto compute = MakeBackend(*device);
  auto copy = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(compute->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(compute->EnqueueCompute({&c, 1}));
  Event kernel = compute->Record();
  FERRY_ASSERT_OK(copy->EnqueueSetTensor(*d, host->base(), 0, 65536));
  Event copied = copy->Record();
  gate.Open();

  // By real completion order: the copy completes while the kernel runs.
  FERRY_ASSERT_OK(copied.WaitBlocking());
  EXPECT_FALSE(kernel.IsComplete());
  FERRY_ASSERT_OK(kernel.WaitBlocking());
  // And by the model's clock.
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_kernel, SimDevice::EventTime(kernel));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_copy, SimDevice::EventTime(copied));
  EXPECT_LT(t_copy, t_kernel);
  EXPECT_EQ(device->stats(SimEngineKind::kCompute).busy_ns,
            static_cast<int64_t>(std::llround(OpFlops(*c) / 40e6 * 1e9)));
  FERRY_EXPECT_OK(compute->Synchronize());
  FERRY_EXPECT_OK(copy->Synchronize());
}

TEST(SimBackendTest, CrossStreamEventWait) {
  auto device = MakeDevice("flops=200M,d2h=10GB/s,lat=5us");
  const SimConfig& config = device->config();
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {64, 64}, "a");
  Tensor* b = *ctx.NewTensor(DType::kF32, {64, 64}, "b");
  Tensor* c = *MulMat(ctx, a, b);  // 0.5 MFLOP: 2.6 ms modelled.
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  std::vector<float> ones(64 * 64, 1.0f);
  FERRY_ASSERT_OK(SetTensorData(*a, ones.data()));
  FERRY_ASSERT_OK(SetTensorData(*b, ones.data()));
  const size_t bytes = static_cast<size_t>(c->NumBytes());
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(bytes));
  std::memset(host->base(), 0, bytes);

  auto producer = MakeBackend(*device);
  auto consumer = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(producer->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(producer->EnqueueCompute({&c, 1}));
  Event produced = producer->Record();
  FERRY_ASSERT_OK(consumer->EnqueueWait(produced));
  Event waited = consumer->Record();  // Covers the wait alone.
  FERRY_ASSERT_OK(consumer->EnqueueGetTensor(*c, host->base(), 0, bytes));
  gate.Open();
  FERRY_ASSERT_OK(consumer->Synchronize());
  EXPECT_TRUE(produced.IsComplete());
  const float* out = static_cast<const float*>(host->base());
  EXPECT_EQ(out[0], 64.0f);
  EXPECT_EQ(out[64 * 64 - 1], 64.0f);

  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_produced,
                             SimDevice::EventTime(produced));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_waited, SimDevice::EventTime(waited));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_done,
                             SimDevice::EventTime(consumer->Record()));
  EXPECT_EQ(t_waited, t_produced);
  EXPECT_EQ(t_done - t_produced, CopyNs(config, bytes, config.d2h_bw));
}

TEST(SimBackendTest, TwoStreamsShareTheCopyEngine) {
  auto device = MakeDevice("h2d=1GB/s,lat=10us");
  const SimConfig& config = device->config();
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {1 << 18}, "a");  // 1 MiB.
  Tensor* b = *ctx.NewTensor(DType::kF32, {1 << 18}, "b");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  const size_t bytes = size_t{1} << 20;
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(bytes));
  std::memset(host->base(), 7, bytes);
  auto s0 = MakeBackend(*device);
  auto s1 = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(s0->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(s1->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(s0->EnqueueSetTensor(*a, host->base(), 0, bytes));
  FERRY_ASSERT_OK(s1->EnqueueSetTensor(*b, host->base(), 0, bytes));
  Event e0 = s0->Record();
  Event e1 = s1->Record();
  gate.Open();
  FERRY_ASSERT_OK(s0->Synchronize());
  FERRY_ASSERT_OK(s1->Synchronize());
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t0, SimDevice::EventTime(e0));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t1, SimDevice::EventTime(e1));
  // One link: the second copy starts when the first ends.
  EXPECT_EQ(t1 - t0, CopyNs(config, bytes, config.h2d_bw));
}

TEST(SimBackendTest, PinnedCopiesAreAsyncPageableAreSynchronous) {
  auto device = MakeDevice("h2d=1GB/s,d2h=1GB/s,lat=10us");
  const SimConfig& config = device->config();
  const size_t bytes = size_t{32} << 20;  // 33.6 ms pinned, 67 ms pageable.
  Context ctx;
  Tensor* t =
      *ctx.NewTensor(DType::kF32, {static_cast<int64_t>(bytes / 4)}, "t");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto pinned,
                             device->host_buffer_type()->Allocate(bytes));
  std::memset(pinned->base(), 5, bytes);
  std::vector<char> pageable(bytes, 9);
  auto backend = MakeBackend(*device);

  {
    SimGate gate(*device);
    FERRY_ASSERT_OK(backend->EnqueueWait(gate.event()));
    FERRY_ASSERT_OK(backend->EnqueueSetTensor(*t, pinned->base(), 0, bytes));
    EXPECT_FALSE(backend->Record().IsComplete());  // Returned at once.
  }
  FERRY_ASSERT_OK(backend->Synchronize());
  EXPECT_EQ(device->stats(SimEngineKind::kH2D).busy_ns,
            CopyNs(config, bytes, config.h2d_bw));

  device->ResetStats();
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*t, pageable.data(), 0, bytes));
  EXPECT_TRUE(backend->Record().IsComplete());  // Returned when done.
  EXPECT_EQ(device->stats(SimEngineKind::kH2D).busy_ns,
            CopyNs(config, bytes, config.pageable_h2d_bw()));

  std::vector<char> back(bytes, 0);
  device->ResetStats();
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(*t, back.data(), 0, bytes));
  EXPECT_TRUE(backend->Record().IsComplete());
  EXPECT_EQ(back, pageable);
  EXPECT_EQ(device->stats(SimEngineKind::kD2H).busy_ns,
            CopyNs(config, bytes, config.pageable_d2h_bw()));

  {
    SimGate gate(*device);
    FERRY_ASSERT_OK(backend->EnqueueWait(gate.event()));
    FERRY_ASSERT_OK(backend->EnqueueGetTensor(*t, pinned->base(), 0, bytes));
    EXPECT_FALSE(backend->Record().IsComplete());
  }
  FERRY_ASSERT_OK(backend->Synchronize());
  EXPECT_EQ(std::memcmp(pinned->base(), pageable.data(), bytes), 0);
}

TEST(SimBackendTest, TimeScaleRunsTheModelFaster) {
  // 1 GiB at 1 GB/s is over a modelled second; at scale 0.01 it takes ~11 ms.
  auto device = MakeDevice("h2d=1GB/s,scale=0.01,mem=2GiB");
  const SimConfig& config = device->config();
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {1 << 10}, "t");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(4096));
  auto backend = MakeBackend(*device);
  const int64_t before = device->ModelNowNanos();
  for (int i = 0; i < 256; ++i) {
    FERRY_ASSERT_OK(backend->EnqueueSetTensor(*t, host->base(), 0, 4096));
  }
  FERRY_ASSERT_OK(backend->Synchronize());
  EXPECT_EQ(device->stats(SimEngineKind::kH2D).busy_ns,
            256 * CopyNs(config, 4096, config.h2d_bw));
  EXPECT_GE(device->ModelNowNanos() - before,
            256 * CopyNs(config, 4096, config.h2d_bw));
}

TEST(SimBackendTest, SlowHostWorkIsReportedAsSlip) {
  // 64 MiB at 1 PB/s is 67 ns modelled; the real memcpy takes far longer.
  auto device = MakeDevice("h2d=1000TB/s,lat=0");
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {int64_t{1} << 24}, "t");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto host, device->host_buffer_type()->Allocate(size_t{64} << 20));
  std::memset(host->base(), 1, size_t{64} << 20);
  auto backend = MakeBackend(*device);
  FERRY_ASSERT_OK(
      backend->EnqueueSetTensor(*t, host->base(), 0, size_t{64} << 20));
  FERRY_ASSERT_OK(backend->Synchronize());
  const SimEngineStats stats = device->stats(SimEngineKind::kH2D);
  EXPECT_EQ(stats.slipped_ops, 1);
  EXPECT_GT(stats.slip_ns, 0);
}

TEST(SimBackendTest, RecordAfterWaitCoversTheWait) {
  auto device = MakeDevice("flops=100M");
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {64, 64}, "a");
  Tensor* c = *MulMat(ctx, a, a);  // 0.5 MFLOP: 5 ms modelled.
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  auto s0 = MakeBackend(*device);
  auto s1 = MakeBackend(*device);
  FERRY_ASSERT_OK(s0->EnqueueCompute({&c, 1}));
  Event done = s0->Record();
  FERRY_ASSERT_OK(s1->EnqueueWait(done));
  Event after = s1->Record();
  FERRY_ASSERT_OK(after.WaitBlocking());
  EXPECT_TRUE(done.IsComplete());
  FERRY_ASSERT_OK(s1->Synchronize());
}

TEST(SimBackendTest, AWaitWithNoWorkHoldsNoEngine) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {64}, "x");
  Tensor* y = *Scale(ctx, x, 2.0f);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  auto waiter = MakeBackend(*device);
  auto worker = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(waiter->EnqueueWait(gate.event()));
  Event waited = waiter->Record();
  // Compute, uploads and downloads all proceed while the wait is pending.
  std::vector<float> in(64, 1.0f), out(64);
  FERRY_ASSERT_OK(worker->EnqueueSetTensor(*x, in.data(), 0, 256));
  FERRY_ASSERT_OK(worker->EnqueueCompute({&y, 1}));
  FERRY_ASSERT_OK(worker->EnqueueGetTensor(*y, out.data(), 0, 256));
  FERRY_ASSERT_OK(worker->Synchronize());
  EXPECT_EQ(out, std::vector<float>(64, 2.0f));
  EXPECT_FALSE(waited.IsComplete());
  gate.Open();
  FERRY_ASSERT_OK(waited.WaitBlocking());
  FERRY_ASSERT_OK(waiter->Synchronize());
}

TEST(SimBackendTest, AwaitableCompute) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {8}, "x");
  Tensor* y = *Scale(ctx, x, -1.0f);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  std::vector<float> in(8, 2.0f), out(8);
  FERRY_ASSERT_OK(SetTensorData(*x, in.data()));
  auto backend = MakeBackend(*device);
  auto task = [&]() -> Task<absl::Status> {
    FERRY_CO_RETURN_IF_ERROR(co_await backend->ComputeAsync({&y, 1}));
    co_return co_await backend->Record();
  };
  FERRY_ASSERT_OK(SyncWait(task()));
  FERRY_ASSERT_OK(GetTensorData(*y, out.data()));
  EXPECT_EQ(out, std::vector<float>(8, -2.0f));
}

// ---------------------------------------------------------------------------
// Device to device.

TEST(SimBackendTest, CopiesBetweenSimDevices) {
  auto dev0 = MakeDevice("d2d=20GB/s,lat=10us", "simtest0");
  auto dev1 = MakeDevice("d2d=10GB/s,lat=10us", "simtest1");
  Context ctx;
  Tensor* x0 = *ctx.NewTensor(DType::kF32, {4096}, "x0");
  Tensor* y0 = *Scale(ctx, x0, 2.0f);
  Context ctx1;
  Tensor* y1 = *ctx1.NewTensor(DType::kF32, {4096}, "y1");
  Tensor* z1 = *ctx1.NewTensor(DType::kF32, {4096}, "z1");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buf0,
                             AllocateAll(ctx, *dev0->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto buf1,
                             AllocateAll(ctx1, *dev1->default_buffer_type()));
  std::vector<float> in(4096);
  std::iota(in.begin(), in.end(), 1.0f);
  FERRY_ASSERT_OK(SetTensorData(*x0, in.data()));

  auto b0 = MakeBackend(*dev0);
  auto b1 = MakeBackend(*dev1);
  SimGate gate(*dev0);
  FERRY_ASSERT_OK(b0->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(b0->EnqueueCompute({&y0, 1}));
  Event produced = b0->Record();
  FERRY_ASSERT_OK(b1->EnqueueCopyTensor(*b0, *y0, *y1));  // Waits for b0.
  Event copied = b1->Record();
  FERRY_ASSERT_OK(b1->EnqueueCopyTensor(*b1, *y1, *z1));  // Within dev1.
  gate.Open();
  FERRY_ASSERT_OK(b1->Synchronize());
  std::vector<float> out(4096);
  FERRY_ASSERT_OK(GetTensorData(*z1, out.data()));
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(out[i], 2.0f * in[i]);
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_produced,
                             SimDevice::EventTime(produced));
  FERRY_ASSERT_OK_AND_ASSIGN(int64_t t_copied, SimDevice::EventTime(copied));
  // The slower link of the two.
  EXPECT_EQ(t_copied - t_produced, CopyNs(dev1->config(), 16384, 10e9));
  EXPECT_EQ(dev1->stats(SimEngineKind::kD2D).spans, 2);

  // The synchronous path too.
  std::fill(out.begin(), out.end(), 0.0f);
  FERRY_ASSERT_OK(CopyTensor(*x0, *z1));
  FERRY_ASSERT_OK(GetTensorData(*z1, out.data()));
  EXPECT_EQ(out, in);
  FERRY_ASSERT_OK(b0->Synchronize());
}

TEST(SimBackendTest, CopiesFromHostTensorsUseTheBasePath) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* d = *ctx.NewTensor(DType::kF32, {16}, "d");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  Context host_ctx;
  Tensor* h = *host_ctx.NewTensor(DType::kF32, {16}, "h");
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto pinned, AllocateAll(host_ctx, *device->host_buffer_type()));
  std::vector<float> in(16, 4.0f), out(16);
  std::memcpy(h->data, in.data(), 64);
  auto backend = MakeBackend(*device);
  FERRY_ASSERT_OK(backend->EnqueueCopyTensor(*backend, *h, *d));
  FERRY_ASSERT_OK(backend->Synchronize());
  FERRY_ASSERT_OK(GetTensorData(*d, out.data()));
  EXPECT_EQ(out, in);
}

// ---------------------------------------------------------------------------
// Faults.

TEST(SimFaultTest, AllocationFault) {
  auto device = MakeDevice("");
  device->SetFaults({.alloc = 2});
  BufferType* type = device->default_buffer_type();
  FERRY_ASSERT_OK_AND_ASSIGN(auto a, type->Allocate(1024));
  EXPECT_THAT(type->Allocate(1024),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("injected fault")));
  FERRY_ASSERT_OK_AND_ASSIGN(auto b, type->Allocate(1024));
  EXPECT_EQ(device->memory_used(), 2048u);
}

TEST(SimFaultTest, CopyFaultFailsTheStreamUntilSynchronize) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {64}, "x");
  Tensor* y = *Scale(ctx, x, 2.0f);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(512));
  float* in = static_cast<float*>(host->base());
  float* out = in + 64;
  std::vector<float> sentinel(64, -1.0f);
  FERRY_ASSERT_OK(SetTensorData(*y, sentinel.data()));
  for (int i = 0; i < 64; ++i) in[i] = static_cast<float>(i);
  auto backend = MakeBackend(*device);

  device->SetFaults({.copy = 1});
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*x, in, 0, 256));  // Fails later.
  Event failed = backend->Record();
  FERRY_ASSERT_OK(backend->EnqueueCompute({&y, 1}));  // Must not run.
  EXPECT_THAT(backend->Synchronize(),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("simtest/h2d: injected fault")));
  EXPECT_THAT(failed.WaitBlocking(), StatusIs(absl::StatusCode::kInternal));
  std::vector<float> check(64);
  FERRY_ASSERT_OK(GetTensorData(*y, check.data()));
  EXPECT_EQ(check, sentinel);

  // The device and the backend work again.
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*x, in, 0, 256));
  FERRY_ASSERT_OK(backend->EnqueueCompute({&y, 1}));
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(*y, out, 0, 256));
  FERRY_ASSERT_OK(backend->Synchronize());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(out[i], 2.0f * i);
}

TEST(SimFaultTest, KernelFaultAndRecovery) {
  auto device = MakeDevice("");
  Context ctx;
  SmallGraph g = BuildSmallGraph(ctx);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  Tensor* out = g.out;
  FERRY_ASSERT_OK_AND_ASSIGN(Graph graph, Graph::Build({&out, 1}));
  auto backend = MakeBackend(*device);
  device->SetFaults({.kernel = 3});
  FERRY_ASSERT_OK(backend->EnqueueCompute(graph.nodes()));
  absl::Status status = backend->Synchronize();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal,
                               HasSubstr("simtest/compute: injected fault")));
  EXPECT_THAT(status.message(),
              HasSubstr(std::string(OpName(graph.node(2)->op))));
  EXPECT_EQ(device->stats(SimEngineKind::kCompute).failed_ops, 1);
  FERRY_ASSERT_OK(backend->Compute(graph.nodes()));
  FERRY_EXPECT_OK(backend->Synchronize());
}

TEST(SimFaultTest, PageableCopyFaultIsReturnedAtOnce) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {64}, "x");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  std::vector<float> in(64, 1.0f);
  auto backend = MakeBackend(*device);
  device->SetFaults({.copy = 1});
  EXPECT_THAT(
      backend->EnqueueSetTensor(*x, in.data(), 0, 256),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("injected fault")));
  FERRY_EXPECT_OK(backend->Synchronize());  // Already reported and cleared.
  FERRY_EXPECT_OK(backend->EnqueueSetTensor(*x, in.data(), 0, 256));

  // Synchronous buffer transfers count too.
  device->SetFaults({.copy = 1});
  EXPECT_THAT(SetTensorData(*x, in.data()),
              StatusIs(absl::StatusCode::kInternal));
  FERRY_EXPECT_OK(SetTensorData(*x, in.data()));
}

TEST(SimFaultTest, AFaultStaysInItsStream) {
  auto device = MakeDevice("");
  Context ctx;
  Tensor* a = *ctx.NewTensor(DType::kF32, {64}, "a");
  Tensor* b = *ctx.NewTensor(DType::kF32, {64}, "b");
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(512));
  std::memset(host->base(), 0, 512);
  auto s0 = MakeBackend(*device);
  auto s1 = MakeBackend(*device);
  device->SetFaults({.copy = 1});
  FERRY_ASSERT_OK(s0->EnqueueSetTensor(*a, host->base(), 0, 256));
  FERRY_ASSERT_OK(s1->EnqueueSetTensor(*b, host->base(), 0, 256));
  Event s0_done = s0->Record();
  // A stream waiting on the failed one fails too.
  auto s2 = MakeBackend(*device);
  FERRY_ASSERT_OK(s2->EnqueueWait(s0_done));
  FERRY_ASSERT_OK(
      s2->EnqueueGetTensor(*a, static_cast<char*>(host->base()) + 256, 0, 256));
  FERRY_EXPECT_OK(s1->Synchronize());
  EXPECT_THAT(s0->Synchronize(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(s2->Synchronize(), StatusIs(absl::StatusCode::kInternal));
  FERRY_EXPECT_OK(s2->Synchronize());
}

TEST(SimFaultTest, FaultsFromTheConfigString) {
  auto device = MakeDevice("fail_alloc=1");
  EXPECT_THAT(device->default_buffer_type()->Allocate(64),
              StatusIs(absl::StatusCode::kResourceExhausted));
  FERRY_EXPECT_OK(device->default_buffer_type()->Allocate(64).status());
}

// ---------------------------------------------------------------------------
// Trace.

TEST(SimTraceTest, EveryCopyAndKernelIsASpan) {
  TraceRecorder& trace = TraceRecorder::Global();
  trace.Clear();
  trace.SetEnabled(true);
  auto device = MakeDevice("h2d=1GB/s,d2h=2GB/s,lat=1us", "simtrace");
  const SimConfig& config = device->config();
  Context ctx;
  Tensor* x = *ctx.NewTensor(DType::kF32, {1024}, "x");
  Tensor* y = *Scale(ctx, x, 2.0f);
  y->name = "y";
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             AllocateAll(ctx, *device->default_buffer_type()));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host,
                             device->host_buffer_type()->Allocate(8192));
  std::memset(host->base(), 0, 8192);
  auto backend = MakeBackend(*device);
  SimGate gate(*device);
  FERRY_ASSERT_OK(backend->EnqueueWait(gate.event()));
  FERRY_ASSERT_OK(backend->EnqueueSetTensor(*x, host->base(), 0, 4096));
  FERRY_ASSERT_OK(backend->EnqueueCompute({&y, 1}));
  FERRY_ASSERT_OK(backend->EnqueueGetTensor(
      *y, static_cast<char*>(host->base()) + 4096, 0, 4096));
  gate.Open();
  FERRY_ASSERT_OK(backend->Synchronize());
  trace.SetEnabled(false);

  const std::vector<std::string> tracks = trace.TrackNames();
  const std::vector<TraceSpan> spans = trace.Spans();
  auto span_on = [&](absl::string_view track) -> const TraceSpan* {
    for (const TraceSpan& span : spans) {
      if (tracks[static_cast<size_t>(span.track)] == track) return &span;
    }
    return nullptr;
  };
  const TraceSpan* h2d = span_on("simtrace/h2d");
  ASSERT_NE(h2d, nullptr);
  EXPECT_EQ(h2d->name, "h2d x");
  EXPECT_EQ(h2d->end_ns - h2d->begin_ns, CopyNs(config, 4096, 1e9));
  EXPECT_EQ(h2d->args[0].value, 4096);
  const int64_t h2d_end = h2d->end_ns;
  const TraceSpan* kernel = span_on("simtrace/compute");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->name, "scale y");
  EXPECT_EQ(kernel->begin_ns, h2d_end);  // Starts when the upload ends.
  const TraceSpan* d2h = span_on("simtrace/d2h");
  ASSERT_NE(d2h, nullptr);
  EXPECT_EQ(d2h->end_ns - d2h->begin_ns, CopyNs(config, 4096, 2e9));
  trace.Clear();
}

}  // namespace
}  // namespace ferry
