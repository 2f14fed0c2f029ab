#include "ferry/backends/cpu/cpu_packed_buffer.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ferry/backends/buffer.h"
#include "ferry/backends/host/internal/packed_layout.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using cpu_internal::PackedLayout;
using ::ferry::testing::StatusIs;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f + 1.0f;
  return v;
}

// A context with a packable weight, a non-packable one and a view, placed in
// one CpuPackedBuffer.
struct Placed {
  Context ctx;
  Tensor* matrix = nullptr;  // [70, 128] f32: packed.
  Tensor* norm = nullptr;    // [70] f32: plain.
  Tensor* view = nullptr;    // Row 1 of matrix.
  CpuPackedBufferType type{nullptr};
  std::unique_ptr<Buffer> buffer;

  Placed() {
    matrix = *ctx.NewTensor(DType::kF32, {70, 128});
    matrix->name = "matrix";
    norm = *ctx.NewTensor(DType::kF32, {70});
    norm->name = "norm";
    view = *View1D(ctx, matrix, 70, matrix->nb[1]);
    view->name = "row1";
    const size_t matrix_bytes = type.AllocSize(*matrix);
    buffer = *type.Allocate(matrix_bytes + 64 + type.AllocSize(*norm));
    FERRY_CHECK(PlaceTensor(*buffer, *matrix, 0).ok());
    FERRY_CHECK(PlaceTensor(*buffer, *norm, matrix_bytes + 64).ok());
    FERRY_CHECK(PlaceView(*view).ok());
  }
};

TEST(CpuPackedBufferTest, TypeIsNotHostAndPadsPackedTensors) {
  CpuPackedBufferType type(nullptr);
  EXPECT_FALSE(type.is_host());
  EXPECT_EQ(type.name(), "cpu_packed");
  Context ctx;
  Tensor* aligned = *ctx.NewTensor(DType::kF16, {100, 128});
  Tensor* padded = *ctx.NewTensor(DType::kF32, {10, 520});
  Tensor* small = *ctx.NewTensor(DType::kF32, {10, 20});
  EXPECT_EQ(type.AllocSize(*aligned), size_t{100 * 128 * 2});
  EXPECT_EQ(type.AllocSize(*padded), size_t{10 * 576 * 4});
  EXPECT_EQ(type.AllocSize(*small), size_t{10 * 20 * 4});
  EXPECT_TRUE(StoredPacked(*padded));
  EXPECT_FALSE(StoredPacked(*small));
}

TEST(CpuPackedBufferTest, StoresPanelsAndReadsBackRows) {
  Placed p;
  const std::vector<float> values = Iota(70 * 128);
  FERRY_ASSERT_OK(SetTensorData(*p.matrix, values.data()));
  // The memory holds panels, not rows.
  const PackedLayout layout(DType::kF32, p.matrix->ne);
  const auto* raw = static_cast<const float*>(p.matrix->data);
  for (int64_t e = 0; e < 70 * 128; ++e) {
    ASSERT_EQ(raw[layout.PackedIndex(e)], values[e]) << e;
  }
  EXPECT_NE(std::memcmp(raw, values.data(), 70 * sizeof(float)), 0);
  std::vector<float> back(values.size());
  FERRY_ASSERT_OK(GetTensorData(*p.matrix, back.data()));
  EXPECT_EQ(back, values);
  // A byte range across rows and panels, starting inside an element.
  std::vector<uint8_t> part(1000);
  const size_t offset = 4 * 70 * 63 + 3;
  FERRY_ASSERT_OK(GetTensorData(*p.matrix, part.data(), offset, part.size()));
  EXPECT_EQ(
      std::memcmp(part.data(),
                  reinterpret_cast<const uint8_t*>(values.data()) + offset,
                  part.size()),
      0);
}

TEST(CpuPackedBufferTest, PartialWritesLandInTheirPlaces) {
  Placed p;
  std::vector<float> values = Iota(70 * 128);
  FERRY_ASSERT_OK(SetTensorData(*p.matrix, values.data()));
  // Overwrite bytes [offset, offset + 777) in the logical layout.
  std::vector<uint8_t> patch(777);
  for (size_t i = 0; i < patch.size(); ++i) patch[i] = static_cast<uint8_t>(i);
  const size_t offset = 4 * 70 * 60 + 2;
  FERRY_ASSERT_OK(SetTensorData(*p.matrix, patch.data(), offset, patch.size()));
  std::memcpy(reinterpret_cast<uint8_t*>(values.data()) + offset, patch.data(),
              patch.size());
  std::vector<float> back(values.size());
  FERRY_ASSERT_OK(GetTensorData(*p.matrix, back.data()));
  EXPECT_EQ(std::memcmp(back.data(), values.data(), back.size() * 4), 0);
}

TEST(CpuPackedBufferTest, MemsetFillsLogicalRange) {
  Placed p;
  std::vector<float> values = Iota(70 * 128);
  FERRY_ASSERT_OK(SetTensorData(*p.matrix, values.data()));
  FERRY_ASSERT_OK(p.buffer->MemsetTensor(*p.matrix, 0, 4 * 70 * 5, 4 * 100));
  std::fill(values.begin() + 70 * 5, values.begin() + 70 * 5 + 100, 0.0f);
  std::vector<float> back(values.size());
  FERRY_ASSERT_OK(GetTensorData(*p.matrix, back.data()));
  EXPECT_EQ(back, values);
}

TEST(CpuPackedBufferTest, PlainTensorsStayRowMajor) {
  Placed p;
  const std::vector<float> values = Iota(70);
  FERRY_ASSERT_OK(SetTensorData(*p.norm, values.data()));
  EXPECT_EQ(std::memcmp(p.norm->data, values.data(), 70 * sizeof(float)), 0);
  EXPECT_EQ(GetPackedState(*p.norm), PackedState::kPlain);
}

TEST(CpuPackedBufferTest, ViewsIntoPackedTensorsAreRefused) {
  Placed p;
  std::vector<float> row(70);
  EXPECT_THAT(GetTensorData(*p.view, row.data()),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(SetTensorData(*p.view, row.data()),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(p.buffer->MemsetTensor(*p.view, 0, 0, 4),
              StatusIs(absl::StatusCode::kUnimplemented));
}

TEST(CpuPackedBufferTest, PackedStateOfEachKind) {
  Placed p;
  EXPECT_EQ(GetPackedState(*p.matrix), PackedState::kPacked);
  EXPECT_EQ(GetPackedState(*p.view), PackedState::kViewOfPacked);
  EXPECT_EQ(GetPackedState(*p.norm), PackedState::kPlain);
  // The same shape in host memory is plain.
  HostBufferType host("host", 64, nullptr);
  Context ctx;
  Tensor* t = *ctx.NewTensor(DType::kF32, {70, 128});
  auto buffer = *host.Allocate(static_cast<size_t>(t->NumBytes()));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  EXPECT_EQ(GetPackedState(*t), PackedState::kPlain);
  // A graph allocator's placement (possibly stale) is never looked into.
  p.matrix->flags |= kTensorFlagAllocated;
  EXPECT_EQ(GetPackedState(*p.matrix), PackedState::kPlain);
}

TEST(CpuPackedBufferTest, CopyTensorGoesThroughTheLogicalLayout) {
  Placed p;
  HostBufferType host("host", 64, nullptr);
  Context ctx;
  Tensor* src = *ctx.NewTensor(DType::kF32, {70, 128});
  Tensor* dst = *ctx.NewTensor(DType::kF32, {70, 128});
  auto buffer = *host.Allocate(2 * static_cast<size_t>(src->NumBytes()));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *src, 0));
  FERRY_ASSERT_OK(
      PlaceTensor(*buffer, *dst, static_cast<size_t>(src->NumBytes())));
  const std::vector<float> values = Iota(70 * 128);
  std::memcpy(src->data, values.data(), values.size() * sizeof(float));
  FERRY_ASSERT_OK(CopyTensor(*src, *p.matrix));  // Host -> packed.
  FERRY_ASSERT_OK(CopyTensor(*p.matrix, *dst));  // Packed -> host.
  EXPECT_EQ(std::memcmp(dst->data, values.data(), values.size() * 4), 0);
}

// Packed weights come from the same host memory as every host buffer: a
// large buffer starts on a huge page (AllocateHostMemory).
TEST(CpuPackedBufferTest, LargeBuffersStartOnAHugePage) {
  CpuPackedBufferType type(nullptr);
  constexpr size_t kHugePage = size_t{2} << 20;
  auto buffer = type.Allocate(3 * kHugePage + 100);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->base()) % kHugePage, 0u);
}

}  // namespace
}  // namespace ferry
