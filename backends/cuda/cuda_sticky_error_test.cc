// A sticky CUDA error (an illegal address) ruins the device's context: the
// backend reports it, and every later call on the device returns it. Its
// own binary, since the process cannot use the GPU afterwards.
#include <memory>
#include <vector>

#include "ferry/backends/cuda/cuda_backend.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/cuda/testing/test_kernels.h"
#include "ferry/graph/context.h"
#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CudaStickyErrorTest, IllegalAddressFailsEveryLaterCall) {
  FERRY_CUDA_TEST_NEEDS_DEVICES(1);
  FERRY_ASSERT_OK_AND_ASSIGN(CudaDevice * device,
                             cuda_testing::GlobalCudaDevice(0));
  auto& cuda = *device;
  FERRY_ASSERT_OK_AND_ASSIGN(auto owned, cuda.CreateBackend());
  auto& backend = static_cast<CudaBackend&>(*owned);
  // The fault may show at the launcher's own error check already.
  (void)cuda_testing::LaunchIllegalWriteKernel(
      backend.stream(CudaBackend::StreamKind::kCompute));
  const Event event = backend.Record();
  EXPECT_THAT(event.WaitBlocking(), StatusIs(absl::StatusCode::kInternal,
                                             HasSubstr("context is lost")));
  EXPECT_THAT(backend.Synchronize(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(cuda.sticky_error(), StatusIs(absl::StatusCode::kInternal));
  Context ctx;
  FERRY_ASSERT_OK_AND_ASSIGN(Tensor * t, ctx.NewTensor(DType::kF32, {4}, "t"));
  std::vector<float> host(4);
  EXPECT_THAT(backend.EnqueueGetTensor(*t, host.data(), 0, 16),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(cuda.CreateBackend().status(),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(cuda.default_buffer_type()->Allocate(1024).status(),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_FALSE(backend.Record().WaitBlocking().ok());
}

}  // namespace
}  // namespace ferry
