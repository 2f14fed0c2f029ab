// Conformance: buffers and transfers.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "ferry/tests/conformance/conformance.h"
#include "gmock/gmock.h"

namespace ferry::testing {
namespace {

using ::testing::Not;

TEST_P(BufferConformanceTest, AllocatesAlignedBuffersOfEverySize) {
  BufferType& type = *backend().default_buffer_type();
  EXPECT_GT(type.alignment(), 0u);
  EXPECT_EQ(type.alignment() & (type.alignment() - 1), 0u) << "power of two";
  for (size_t size : {size_t{1}, size_t{255}, size_t{4096}, size_t{1} << 20}) {
    FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(size));
    EXPECT_GE(buffer->size(), size);
    EXPECT_NE(buffer->base(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->base()) % type.alignment(),
              0u);
    EXPECT_EQ(buffer->type(), &type);
    EXPECT_EQ(buffer->is_host(), type.is_host());
  }
}

TEST_P(BufferConformanceTest, ImpossibleAllocationIsAStatus) {
  BufferType& type = *backend().default_buffer_type();
  // Far beyond any memory: a status (ResourceExhausted or InvalidArgument
  // above max_size), never a crash or a null buffer.
  absl::StatusOr<std::unique_ptr<Buffer>> huge =
      type.Allocate(std::numeric_limits<size_t>::max() / 4);
  EXPECT_THAT(huge, Not(IsOk()));
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status()) ||
              absl::IsInvalidArgument(huge.status()))
      << huge.status();
  // The type still works.
  FERRY_EXPECT_OK(type.Allocate(64).status());
}

TEST_P(BufferConformanceTest, SynchronousRoundTrip) {
  Tensor* t = NewDeviceTensor(1000, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> in = Iota(1000, 0.5f);
  Write(*t, in);
  EXPECT_EQ(Read(*t), in);
}

TEST_P(BufferConformanceTest, SynchronousPartialRangesAndMemset) {
  Tensor* t = NewDeviceTensor(256, "t");
  ASSERT_NE(t, nullptr);
  Write(*t, std::vector<float>(256, 1.0f));
  const std::vector<float> part = Iota(10, 1.0f, 100.0f);
  FERRY_ASSERT_OK(SetTensorData(*t, part.data(), 40 * 4, 10 * 4));
  FERRY_ASSERT_OK(t->buffer->MemsetTensor(*t, 0, 200 * 4, 56 * 4));
  std::vector<float> back = Read(*t);
  for (int i = 0; i < 256; ++i) {
    const float expected = i >= 40 && i < 50 ? part[i - 40]
                           : i >= 200        ? 0.0f
                                             : 1.0f;
    ASSERT_EQ(back[i], expected) << i;
  }
  std::vector<float> window(5);
  FERRY_ASSERT_OK(GetTensorData(*t, window.data(), 42 * 4, 5 * 4));
  EXPECT_EQ(window, std::vector<float>(part.begin() + 2, part.begin() + 7));
  FERRY_ASSERT_OK(t->buffer->Clear(0));
  EXPECT_EQ(Read(*t), std::vector<float>(256, 0.0f));
}

TEST_P(BufferConformanceTest, OutOfRangeTransfersAreStatuses) {
  Tensor* t = NewDeviceTensor(16, "t");
  ASSERT_NE(t, nullptr);
  std::vector<float> data(32);
  EXPECT_THAT(SetTensorData(*t, data.data(), 32, 64), Not(IsOk()));
  EXPECT_THAT(GetTensorData(*t, data.data(), 0, 65), Not(IsOk()));
  EXPECT_THAT(backend().EnqueueSetTensor(*t, data.data(), 32, 64), Not(IsOk()));
  EXPECT_THAT(backend().EnqueueGetTensor(*t, data.data(), 0, 65), Not(IsOk()));
  // Offsets that overflow when added to the size.
  EXPECT_THAT(backend().EnqueueGetTensor(*t, data.data(), SIZE_MAX - 3, 8),
              Not(IsOk()));
  // Nothing was queued: the backend is healthy.
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(BufferConformanceTest, AsyncRoundTripWithPageableMemory) {
  Tensor* t = NewDeviceTensor(4096, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> in = Iota(4096, 3.0f);
  std::vector<float> out(4096, -1.0f);
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, in.data(), 0, 4096 * 4));
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, out.data(), 0, 4096 * 4));
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(out, in);
}

TEST_P(BufferConformanceTest, AsyncRoundTripWithPinnedMemory) {
  if (!NeedsHostBuffer()) GTEST_SKIP() << "the device has no pinned memory";
  BufferType& pinned = *device().host_buffer_type();
  EXPECT_TRUE(pinned.is_host());
  FERRY_ASSERT_OK_AND_ASSIGN(auto host, pinned.Allocate(2 * 4096 * 4));
  auto* in = static_cast<float*>(host->base());
  float* out = in + 4096;
  for (int i = 0; i < 4096; ++i) in[i] = static_cast<float>(i) - 7.0f;
  std::fill(out, out + 4096, 0.0f);
  Tensor* t = NewDeviceTensor(4096, "t");
  ASSERT_NE(t, nullptr);
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, in, 0, 4096 * 4));
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, out, 0, 4096 * 4));
  FERRY_ASSERT_OK(backend().Record().WaitBlocking());
  EXPECT_TRUE(std::equal(in, in + 4096, out));
}

TEST_P(BufferConformanceTest, AsyncTransfersRunInOrder) {
  Tensor* t = NewDeviceTensor(512, "t");
  ASSERT_NE(t, nullptr);
  const std::vector<float> v1 = Iota(512, 1.0f), v2 = Iota(512, -1.0f);
  std::vector<float> a(512), b(512);
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, v1.data(), 0, 2048));
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, a.data(), 0, 2048));
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, v2.data(), 0, 2048));
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, b.data(), 0, 2048));
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(a, v1);
  EXPECT_EQ(b, v2);
}

// Rule 2: once an event recorded after a transfer completes, its host
// memory is the caller's again.
TEST_P(BufferConformanceTest, HostMemoryIsFreeOnceTheEventCompletes) {
  Tensor* t = NewDeviceTensor(1024, "t");
  ASSERT_NE(t, nullptr);
  std::vector<float> host = Iota(1024, 2.0f);
  const std::vector<float> sent = host;
  FERRY_ASSERT_OK(backend().EnqueueSetTensor(*t, host.data(), 0, 4096));
  FERRY_ASSERT_OK(backend().Record().WaitBlocking());
  std::fill(host.begin(), host.end(), -1.0f);
  std::vector<float> got(1024);
  FERRY_ASSERT_OK(backend().EnqueueGetTensor(*t, got.data(), 0, 4096));
  FERRY_ASSERT_OK(backend().Record().WaitBlocking());
  EXPECT_EQ(got, sent);
}

TEST_P(BufferConformanceTest, UnplacedTensorTransfersAreStatuses) {
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t,
                             ctx_.NewTensor(DType::kF32, {8}, "unplaced"));
  std::vector<float> data(8);
  EXPECT_THAT(backend().EnqueueSetTensor(*t, data.data(), 0, 32), Not(IsOk()));
  EXPECT_THAT(backend().EnqueueGetTensor(*t, data.data(), 0, 32), Not(IsOk()));
  EXPECT_THAT(SetTensorData(*t, data.data()), Not(IsOk()));
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(BufferConformanceTest, TransfersIntoAnotherDevicesMemoryAreStatuses) {
  Tensor* foreign = NewForeignTensor(64, "foreign");
  ASSERT_NE(foreign, nullptr);
  std::vector<float> data(64);
  EXPECT_THAT(backend().EnqueueSetTensor(*foreign, data.data(), 0, 256),
              Not(IsOk()));
  EXPECT_THAT(backend().EnqueueGetTensor(*foreign, data.data(), 0, 256),
              Not(IsOk()));
  FERRY_EXPECT_OK(backend().Synchronize());
}

TEST_P(BufferConformanceTest, CopyWithinTheBackend) {
  Tensor* a = NewDeviceTensor(300, "a");
  Tensor* b = NewDeviceTensor(300, "b");
  ASSERT_NE(b, nullptr);
  const std::vector<float> values = Iota(300, 0.25f, 1.0f);
  Write(*a, values);
  absl::Status copied = backend().EnqueueCopyTensor(backend(), *a, *b);
  if (absl::IsUnimplemented(copied)) {
    GTEST_SKIP() << "no async copy within the backend: " << copied;
  }
  FERRY_ASSERT_OK(copied);
  FERRY_ASSERT_OK(backend().Synchronize());
  EXPECT_EQ(Read(*b), values);
  // Sizes must match.
  Tensor* small = NewDeviceTensor(10, "small");
  EXPECT_THAT(backend().EnqueueCopyTensor(backend(), *a, *small),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace ferry::testing
