// The CUDA backend's behaviour, the same on a real GPU (cuda_backend_test,
// tagged requires-gpu; skips, saying why, where no GPU is usable) and on the
// fake CUDA runtime (cuda_backend_test_on_fake, everywhere).
#include "ferry/backends/cuda/cuda_backend.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/cuda/testing/test_kernels.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "ferry/runtime/sync_wait.h"
#include "ferry/runtime/task.h"
#include "ferry/runtime/timeline_semaphore.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;

constexpr int64_t kMillisecond = 1'000'000;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FERRY_CUDA_TEST_NEEDS_DEVICES(1);
    device_count_ = *CudaDeviceCount();
    FERRY_ASSERT_OK_AND_ASSIGN(device_, cuda_testing::GlobalCudaDevice(0));
    FERRY_ASSERT_OK_AND_ASSIGN(auto backend, device_->CreateBackend());
    backend_.reset(static_cast<CudaBackend*>(backend.release()));
  }

  // A placed f32 tensor of n elements in `type`.
  Tensor* NewPlaced(BufferType* type, int64_t n, const char* name) {
    absl::StatusOr<Tensor*> t = ctx_.NewTensor(DType::kF32, {n}, name);
    EXPECT_THAT(t, IsOk());
    auto buffer = type->Allocate(static_cast<size_t>(n) * sizeof(float));
    EXPECT_THAT(buffer, IsOk());
    EXPECT_THAT(PlaceTensor(**buffer, **t, 0), IsOk());
    buffers_.push_back(*std::move(buffer));
    return *t;
  }

  int device_count_ = 0;
  CudaDevice* device_ = nullptr;
  std::unique_ptr<CudaBackend> backend_;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(CudaBackendTest, PropsDescribeTheGpu) {
  const DeviceProps props = device_->props();
  EXPECT_EQ(props.name, "cuda0");
  EXPECT_EQ(props.type, DeviceType::kGpu);
  EXPECT_GT(props.memory_total, 0u);
  EXPECT_GT(props.memory_free, 0u);
  EXPECT_TRUE(props.caps.async && props.caps.events && props.caps.host_buffer);
  EXPECT_FALSE(device_->info().pci_bus_id.empty());
  EXPECT_GE(device_->info().compute_major, 7);
  EXPECT_NE(props.description.find(device_->info().gpu_name),
            std::string::npos);
}

TEST_F(CudaBackendTest, RejectsUnknownParams) {
  EXPECT_THAT(device_->CreateBackend("threads=4").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CudaBackendTest, AsyncRoundTripThroughPinnedMemory) {
  constexpr int64_t n = 1 << 20;
  Tensor* t = NewPlaced(device_->default_buffer_type(), n, "t");
  Tensor* pinned_in = NewPlaced(device_->host_buffer_type(), n, "in");
  Tensor* pinned_out = NewPlaced(device_->host_buffer_type(), n, "out");
  float* in = static_cast<float*>(pinned_in->data);
  float* out = static_cast<float*>(pinned_out->data);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.25f;
  FERRY_ASSERT_OK(backend_->EnqueueSetTensor(*t, in, 0, n * sizeof(float)));
  FERRY_ASSERT_OK(backend_->EnqueueGetTensor(*t, out, 0, n * sizeof(float)));
  FERRY_ASSERT_OK(backend_->Synchronize());
  EXPECT_EQ(std::memcmp(in, out, n * sizeof(float)), 0);
}

TEST_F(CudaBackendTest, OutOfRangeAndMisplacedTransfersAreErrors) {
  Tensor* t = NewPlaced(device_->default_buffer_type(), 16, "t");
  std::vector<float> host(32);
  EXPECT_THAT(
      backend_->EnqueueSetTensor(*t, host.data(), 0, 32 * sizeof(float)),
      StatusIs(absl::StatusCode::kOutOfRange));
  Tensor* on_host = NewPlaced(GetCpuDevice().default_buffer_type(), 16, "h");
  EXPECT_THAT(backend_->EnqueueSetTensor(*on_host, host.data(), 0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_EXPECT_OK(backend_->Synchronize());
}

TEST_F(CudaBackendTest, SynchronousBufferOps) {
  Tensor* t = NewPlaced(device_->default_buffer_type(), 256, "t");
  std::vector<float> in(256), out(256);
  std::iota(in.begin(), in.end(), 1.0f);
  FERRY_ASSERT_OK(SetTensorData(*t, in.data()));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(in, out);
  FERRY_ASSERT_OK(t->buffer->Clear(0));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(out, std::vector<float>(256, 0.0f));
}

TEST_F(CudaBackendTest, ComputeAddAndAwaitOnCoroutine) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a,
                             ctx.NewTensor(DType::kF32, {1024}, "a"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b,
                             ctx.NewTensor(DType::kF32, {1024}, "b"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * sum, Add(ctx, a, b));
  FERRY_ASSERT_OK_AND_ASSIGN(
      auto buffer, device_->default_buffer_type()->Allocate(3 * 4096));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *a, 0));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *b, 4096));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *sum, 8192));
  std::vector<float> va(1024, 1.5f), vb(1024, 2.0f), out(1024);
  FERRY_ASSERT_OK(SetTensorData(*a, va.data()));
  FERRY_ASSERT_OK(SetTensorData(*b, vb.data()));
  Tensor* nodes[] = {sum};
  FERRY_ASSERT_OK(SyncWait(backend_->ComputeAsync(NodeSpan(nodes))));
  FERRY_ASSERT_OK(GetTensorData(*sum, out.data()));
  EXPECT_EQ(out, std::vector<float>(1024, 3.5f));
}

TEST_F(CudaBackendTest, UnplacedOrUnsupportedNodesAreErrors) {
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, ctx.NewTensor(DType::kF32, {8}, "a"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * s, Scale(ctx, a, 2.0f));
  Tensor* nodes[] = {s};
  EXPECT_THAT(backend_->EnqueueCompute(NodeSpan(nodes)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  FERRY_EXPECT_OK(backend_->Synchronize());
}

TEST_F(CudaBackendTest, WaitOnHostEventHoldsLaterWorkWithoutBlocking) {
  constexpr int64_t n = 4096;
  Tensor* t = NewPlaced(device_->default_buffer_type(), n, "t");
  Tensor* pinned = NewPlaced(device_->host_buffer_type(), n, "p");
  float* host = static_cast<float*>(pinned->data);
  for (int64_t i = 0; i < n; ++i) host[i] = 7.0f;
  auto timeline = std::make_shared<TimelineSemaphore>();
  FERRY_ASSERT_OK(
      backend_->EnqueueWait(Event(timeline, 1)));  // Returns at once.
  FERRY_ASSERT_OK(backend_->EnqueueSetTensor(*t, host, 0, n * sizeof(float)));
  const Event uploaded = backend_->Record();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(uploaded.IsComplete());
  for (int64_t i = 0; i < n; ++i) host[i] = 9.0f;  // Before the gate opens.
  FERRY_ASSERT_OK(timeline->Signal(1));
  FERRY_ASSERT_OK(uploaded.WaitBlocking());
  std::vector<float> out(n);
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(out, std::vector<float>(n, 9.0f));
}

TEST_F(CudaBackendTest, FailedHostEventFailsTheBackendUntilSynchronize) {
  auto timeline = std::make_shared<TimelineSemaphore>();
  FERRY_ASSERT_OK(backend_->EnqueueWait(Event(timeline, 1)));
  const Event after = backend_->Record();
  timeline->Fail(absl::DataLossError("producer faulted"));
  EXPECT_THAT(after.WaitBlocking(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(backend_->Synchronize(), StatusIs(absl::StatusCode::kDataLoss));
  FERRY_EXPECT_OK(backend_->Synchronize());  // Recovered.
}

TEST_F(CudaBackendTest, WaitOnAnotherCudaBackendIsDeviceSide) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto other_owned, device_->CreateBackend());
  auto& other = static_cast<CudaBackend&>(*other_owned);
  FERRY_ASSERT_OK(cuda_testing::LaunchSpinKernel(
      other.stream(CudaBackend::StreamKind::kCompute), 50 * kMillisecond));
  const Event spun = other.Record();
  FERRY_ASSERT_OK(backend_->EnqueueWait(spun));
  const Event after = backend_->Record();
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(after.IsComplete());
  FERRY_ASSERT_OK(after.WaitBlocking());
  EXPECT_TRUE(spun.IsComplete());
}

// Seeing an event complete means seeing complete every event its work
// waited on device-side, although each backend's completions are watched
// on their own and the waited event's watch may signal later. Here the
// waited event's host side lags by hand: its CUDA event is done, its
// timeline not yet.
TEST_F(CudaBackendTest, AnEventCompletesAfterTheEventsItWaitedOn) {
  FERRY_ASSERT_OK_AND_ASSIGN(auto other_owned, device_->CreateBackend());
  auto& other = static_cast<CudaBackend&>(*other_owned);
  for (const bool fail : {false, true}) {
    FERRY_ASSERT_OK(cuda_testing::LaunchSpinKernel(
        other.stream(CudaBackend::StreamKind::kCompute), kMillisecond));
    const Event spun = other.Record();
    FERRY_ASSERT_OK(spun.WaitBlocking());
    auto lagging = std::make_shared<TimelineSemaphore>();
    const Event waited(lagging, 1, device_, spun.native());
    FERRY_ASSERT_OK(backend_->EnqueueWait(waited));
    const Event after = backend_->Record();
    EXPECT_THAT(after.WaitBlocking(absl::Now() + absl::Milliseconds(30)),
                StatusIs(absl::StatusCode::kDeadlineExceeded));
    if (fail) {
      lagging->Fail(absl::DataLossError("never signalled"));
    } else {
      FERRY_ASSERT_OK(lagging->Signal(1));
    }
    FERRY_EXPECT_OK(after.WaitBlocking(absl::Now() + absl::Seconds(10)));
  }
}

TEST_F(CudaBackendTest, UploadIntoUnusedMemoryOverlapsKernels) {
  constexpr int64_t n = 1 << 20;
  Tensor* t = NewPlaced(device_->default_buffer_type(), n, "t");
  Tensor* pinned = NewPlaced(device_->host_buffer_type(), n, "p");
  FERRY_ASSERT_OK(cuda_testing::LaunchSpinKernel(
      backend_->stream(CudaBackend::StreamKind::kCompute),
      1000 * kMillisecond));
  FERRY_ASSERT_OK(
      backend_->EnqueueSetTensor(*t, pinned->data, 0, n * sizeof(float)));
  // The upload runs on the h2d engine while the kernel still spins: it
  // completes well before the kernel does (polled, so a loaded machine or
  // a sanitizer's slowdown cannot fail the test; an upload queued behind
  // the kernel would not complete within the kernel's second).
  const absl::Time deadline = absl::Now() + absl::Milliseconds(800);
  cudaError_t h2d = cudaErrorNotReady;
  while (absl::Now() < deadline) {
    h2d = cudaStreamQuery(backend_->stream(CudaBackend::StreamKind::kH2D));
    if (h2d != cudaErrorNotReady) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(h2d, cudaSuccess);
  EXPECT_EQ(
      cudaStreamQuery(backend_->stream(CudaBackend::StreamKind::kCompute)),
      cudaErrorNotReady);
  FERRY_ASSERT_OK(backend_->Synchronize());
}

TEST_F(CudaBackendTest, CopiesBetweenBackendsOfOneDevice) {
  constexpr int64_t n = 1 << 16;
  FERRY_ASSERT_OK_AND_ASSIGN(auto other, device_->CreateBackend());
  Tensor* src = NewPlaced(device_->default_buffer_type(), n, "src");
  Tensor* dst = NewPlaced(device_->default_buffer_type(), n, "dst");
  std::vector<float> in(n), out(n);
  std::iota(in.begin(), in.end(), 0.0f);
  FERRY_ASSERT_OK(
      other->EnqueueSetTensor(*src, in.data(), 0, n * sizeof(float)));
  FERRY_ASSERT_OK(backend_->EnqueueCopyTensor(*other, *src, *dst));
  FERRY_ASSERT_OK(backend_->Synchronize());
  FERRY_ASSERT_OK(GetTensorData(*dst, out.data()));
  EXPECT_EQ(in, out);
}

TEST_F(CudaBackendTest, PeerCopyBetweenGpus) {
  FERRY_CUDA_TEST_NEEDS_DEVICES(2);
  constexpr int64_t n = 1 << 16;
  FERRY_ASSERT_OK_AND_ASSIGN(CudaDevice * second,
                             cuda_testing::GlobalCudaDevice(1));
  FERRY_ASSERT_OK_AND_ASSIGN(auto other, second->CreateBackend());
  Tensor* src = NewPlaced(second->default_buffer_type(), n, "src");
  Tensor* dst = NewPlaced(device_->default_buffer_type(), n, "dst");
  std::vector<float> in(n), out(n);
  std::iota(in.begin(), in.end(), 3.0f);
  FERRY_ASSERT_OK(
      other->EnqueueSetTensor(*src, in.data(), 0, n * sizeof(float)));
  FERRY_ASSERT_OK(backend_->EnqueueCopyTensor(*other, *src, *dst));
  FERRY_ASSERT_OK(backend_->Synchronize());
  FERRY_ASSERT_OK(GetTensorData(*dst, out.data()));
  EXPECT_EQ(in, out);
}

TEST_F(CudaBackendTest, FreedMemoryIsNotReusedBeforeItsWorkCompletes) {
  constexpr size_t kBytes = 8 << 20;
  FERRY_ASSERT_OK_AND_ASSIGN(auto first,
                             device_->default_buffer_type()->Allocate(kBytes));
  void* const address = first->base();
  // Work still running on a stream of the device when the buffer goes.
  FERRY_ASSERT_OK(cuda_testing::LaunchSpinKernel(
      backend_->stream(CudaBackend::StreamKind::kCompute), 50 * kMillisecond));
  first.reset();
  FERRY_ASSERT_OK_AND_ASSIGN(auto second,
                             device_->default_buffer_type()->Allocate(kBytes));
  EXPECT_NE(second->base(), address);
  FERRY_ASSERT_OK(backend_->Synchronize());
  FERRY_ASSERT_OK_AND_ASSIGN(auto third,
                             device_->default_buffer_type()->Allocate(kBytes));
  EXPECT_EQ(third->base(), address);  // Reused once the work is done.
  EXPECT_GE(device_->memory_stats().hits, 1);
}

TEST_F(CudaBackendTest, OutOfMemoryIsResourceExhaustedAndHarmless) {
  const size_t too_much = device_->info().total_memory * 2;
  EXPECT_THAT(device_->default_buffer_type()->Allocate(too_much).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  Tensor* t = NewPlaced(device_->default_buffer_type(), 64, "t");
  std::vector<float> in(64, 1.0f), out(64);
  FERRY_ASSERT_OK(SetTensorData(*t, in.data()));
  FERRY_ASSERT_OK(GetTensorData(*t, out.data()));
  EXPECT_EQ(in, out);
}

TEST_F(CudaBackendTest, BufferOverHostPointerCopiesAsync) {
  constexpr int64_t n = 1 << 14;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> aligned(
      static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float))));
  std::vector<float> memory(n, 4.0f);
  std::memcpy(aligned.get(), memory.data(), n * sizeof(float));
  FERRY_ASSERT_OK_AND_ASSIGN(auto host, device_->BufferFromHostPointer(
                                            aligned.get(), n * sizeof(float)));
  EXPECT_TRUE(host->is_host());
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * h, ctx_.NewTensor(DType::kF32, {n}, "h"));
  FERRY_ASSERT_OK(PlaceTensor(*host, *h, 0));
  Tensor* d = NewPlaced(device_->default_buffer_type(), n, "d");
  FERRY_ASSERT_OK(backend_->EnqueueCopyTensor(*backend_, *h, *d));
  FERRY_ASSERT_OK(backend_->Synchronize());
  std::vector<float> out(n);
  FERRY_ASSERT_OK(GetTensorData(*d, out.data()));
  EXPECT_EQ(out, memory);
}

TEST_F(CudaBackendTest, ManyRecordsCompleteInOrder) {
  std::vector<Event> events;
  for (int i = 0; i < 200; ++i) {
    FERRY_ASSERT_OK(cuda_testing::LaunchEmptyKernel(
        backend_->stream(CudaBackend::StreamKind::kCompute)));
    events.push_back(backend_->Record());
  }
  FERRY_ASSERT_OK(events.back().WaitBlocking());
  for (const Event& e : events) EXPECT_TRUE(e.IsComplete());
}

}  // namespace
}  // namespace ferry
