// The CUDA backend runs the backend conformance suite on cuda0 (and cuda1
// where present); without a GPU every test skips, saying why.
#include <memory>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/registry.h"
#include "ferry/tests/conformance/backend_conformance.h"

namespace ferry::testing {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(int ordinal) {
  if (absl::Status status = cuda_testing::CheckCudaDevices(ordinal + 1);
      !status.ok()) {
    return absl::UnavailableError(status.message());
  }
  absl::StatusOr<CudaDevice*> device = cuda_testing::GlobalCudaDevice(ordinal);
  if (!device.ok()) return device.status();
  return (*device)->CreateBackend();
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, BackendConformanceTest,
    ::testing::Values(BackendFactory{"cuda0", [] { return MakeCuda(0); }},
                      BackendFactory{"cuda1", [] { return MakeCuda(1); }}),
    FactoryName);

}  // namespace
}  // namespace ferry::testing
