#include "ferry/backends/buffer.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/backends/host_buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(HostBufferTest, PlaceSetGetMemsetClear) {
  HostBufferType type("host", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(1024));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->base()) % 64, 0u);
  EXPECT_TRUE(buffer->is_host());
  buffer->set_usage(BufferUsage::kWeights);
  EXPECT_EQ(BufferUsageName(buffer->usage()), "weights");

  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, ctx.NewTensor(DType::kF32, {4}, "t"));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 128));
  EXPECT_EQ(t->data, static_cast<char*>(buffer->base()) + 128);
  const float in[4] = {1, 2, 3, 4};
  FERRY_ASSERT_OK(SetTensorData(*t, in));
  float out[4] = {};
  FERRY_ASSERT_OK(GetTensorData(*t, out));
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
  FERRY_ASSERT_OK(buffer->MemsetTensor(*t, 0, 4, 4));
  FERRY_ASSERT_OK(GetTensorData(*t, out));
  EXPECT_EQ(out[1], 0.0f);
  FERRY_ASSERT_OK(buffer->Clear(0));
  FERRY_ASSERT_OK(GetTensorData(*t, out));
  EXPECT_EQ(out[0], 0.0f);
}

TEST(HostBufferTest, BadPlacementAndRangesAreErrors) {
  HostBufferType type("host", 64, nullptr, /*max_size=*/4096);
  EXPECT_THAT(type.Allocate(8192), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("exceeds the maximum")));
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer, type.Allocate(64));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * big,
                             ctx.NewTensor(DType::kF32, {32}, "big"));
  EXPECT_THAT(PlaceTensor(*buffer, *big, 0),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("big")));
  EXPECT_EQ(big->buffer, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, ctx.NewTensor(DType::kF32, {4}, "t"));
  EXPECT_THAT(PlaceTensor(*buffer, *t, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("align")));
  float data[8] = {};
  EXPECT_THAT(SetTensorData(*t, data),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  EXPECT_THAT(PlaceTensor(*buffer, *t, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(SetTensorData(*t, data, 8, 16),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(GetTensorData(*t, data, 0, 17),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(HostBufferTest, ViewsAndCopies) {
  HostBufferType type("host", 64, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto a_buf, type.Allocate(256));
  FERRY_ASSERT_OK_AND_ASSIGN(auto b_buf, type.Allocate(256));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * a, ctx.NewTensor(DType::kF32, {8}, "a"));
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * b, ctx.NewTensor(DType::kF32, {8}, "b"));
  FERRY_ASSERT_OK(PlaceTensor(*a_buf, *a, 0));
  FERRY_ASSERT_OK(PlaceTensor(*b_buf, *b, 0));
  std::vector<float> values = {0, 1, 2, 3, 4, 5, 6, 7};
  FERRY_ASSERT_OK(SetTensorData(*a, values.data()));
  FERRY_ASSERT_OK(CopyTensor(*a, *b));
  std::vector<float> out(8);
  FERRY_ASSERT_OK(GetTensorData(*b, out.data()));
  EXPECT_EQ(out, values);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * view,
                             View1D(ctx, a, 4, 4 * sizeof(float)));
  FERRY_ASSERT_OK(PlaceView(*view));
  float tail[4];
  FERRY_ASSERT_OK(GetTensorData(*view, tail));
  EXPECT_EQ(tail[0], 4.0f);

  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * small,
                             ctx.NewTensor(DType::kF32, {4}, "s"));
  EXPECT_THAT(CopyTensor(*a, *small),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sizes")));
}

TEST(HostBufferTest, WrapHostMemoryDoesNotOwn) {
  HostBufferType type("host", 64, nullptr);
  alignas(64) static float storage[16];
  FERRY_ASSERT_OK_AND_ASSIGN(auto buffer,
                             WrapHostMemory(&type, storage, sizeof(storage)));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, ctx.NewTensor(DType::kF32, {16}, "t"));
  FERRY_ASSERT_OK(PlaceTensor(*buffer, *t, 0));
  const float one = 1.0f;
  FERRY_ASSERT_OK(SetTensorData(*t, &one, 0, sizeof(one)));
  EXPECT_EQ(storage[0], 1.0f);
  buffer.reset();  // Must not free `storage`.
  EXPECT_THAT(WrapHostMemory(&type, storage + 1, 8),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The kernel's flags for the mapping holding `address` (smaps' VmFlags), or
// empty if none is found.
std::string MappingFlags(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-' &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HostBufferTest, BuffersOfAHugePageOrMoreStartOnOneAndAskForHugePages) {
  HostBufferType type("host", 64, nullptr);
  constexpr size_t kHugePage = size_t{2} << 20;
  FERRY_ASSERT_OK_AND_ASSIGN(auto large, type.Allocate(3 * kHugePage + 100));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large->base()) % kHugePage, 0u);
  FERRY_ASSERT_OK_AND_ASSIGN(auto small, type.Allocate(kHugePage - 64));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small->base()) % 64, 0u);
  // Alignments below the pointer size (which posix_memalign refuses).
  HostBufferType narrow("narrow", 2, nullptr);
  FERRY_ASSERT_OK_AND_ASSIGN(auto odd, narrow.Allocate(3));
  EXPECT_NE(odd->base(), nullptr);
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  // "hg": the range is advised for huge pages (MADV_HUGEPAGE).
  const std::string flags = MappingFlags(large->base());
  ASSERT_FALSE(flags.empty()) << "no mapping found in /proc/self/smaps";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

}  // namespace
}  // namespace ferry
