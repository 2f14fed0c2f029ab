// Finding CUDA devices in tests. Without a usable device a GPU test skips,
// saying why; under --config=gpu (which sets FERRY_REQUIRE_GPU=1 for tests)
// it fails instead, naming the driver and runtime versions, so a GPU
// machine whose driver is too old for the runtime does not pass a run that
// tested nothing.
//
//   void SetUp() override {
//     FERRY_CUDA_TEST_NEEDS_DEVICES(1);
//     FERRY_ASSERT_OK_AND_ASSIGN(device_, cuda_testing::GlobalCudaDevice(0));
//   }
#ifndef FERRY_BACKENDS_CUDA_TESTING_CUDA_TEST_UTIL_H_
#define FERRY_BACKENDS_CUDA_TESTING_CUDA_TEST_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "gtest/gtest.h"

namespace ferry::cuda_testing {

// "driver 12.8 (12080), runtime 13.0 (13000)"; "no driver" when there is
// none.
std::string CudaVersions();
// True when the environment says GPU tests must not skip
// (FERRY_REQUIRE_GPU=1).
bool GpuRequired();

// OK if at least `count` CUDA devices are usable. Otherwise
// FailedPrecondition when some are (a test that needs more skips even
// under --config=gpu), Unavailable when none is; both say why and name the
// versions.
absl::Status CheckCudaDevices(int count);

// Device cudaN of Registry::Global(), registering the "cuda" family first
// (made on demand, like any program's).
absl::StatusOr<CudaDevice*> GlobalCudaDevice(int ordinal);

}  // namespace ferry::cuda_testing

// Skips the test unless `count` CUDA devices are usable; fails instead when
// there is none and a GPU is required (--config=gpu).
#define FERRY_CUDA_TEST_NEEDS_DEVICES(count)                      \
  do {                                                            \
    const ::absl::Status ferry_cuda_devices =                     \
        ::ferry::cuda_testing::CheckCudaDevices(count);           \
    if (!ferry_cuda_devices.ok()) {                               \
      if (::absl::IsUnavailable(ferry_cuda_devices) &&            \
          ::ferry::cuda_testing::GpuRequired()) {                 \
        GTEST_FAIL() << "FERRY_REQUIRE_GPU=1 (--config=gpu) but " \
                     << ferry_cuda_devices.message();             \
      }                                                           \
      GTEST_SKIP() << ferry_cuda_devices.message();               \
    }                                                             \
  } while (false)

#endif  // FERRY_BACKENDS_CUDA_TESTING_CUDA_TEST_UTIL_H_
