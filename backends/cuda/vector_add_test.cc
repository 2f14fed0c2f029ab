#include "ferry/backends/cuda/vector_add.h"

#include <vector>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(CudaVectorAddTest, AddsOnTheGpu) {
  std::vector<float> a(1000), b(1000), out(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i);
  }
  FERRY_ASSERT_OK(CudaVectorAdd(a.data(), b.data(), out.data(), a.size()));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(out[i], 1.5f * i) << i;
}

}  // namespace
}  // namespace ferry
