// The CUDA backend runs the backend conformance suite on cuda0 (and cuda1
// where present); without a GPU every test skips, saying why.
#include <memory>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/registry.h"
#include "ferry/tests/conformance/backend_conformance.h"

namespace ferry::testing {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(int ordinal) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal >= *count) {
    return absl::UnavailableError(
        absl::StrCat("only ", *count, " CUDA device(s)"));
  }
  return Registry::Global().CreateBackend(absl::StrCat("cuda", ordinal));
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, BackendConformanceTest,
    ::testing::Values(BackendFactory{"cuda0", [] { return MakeCuda(0); }},
                      BackendFactory{"cuda1", [] { return MakeCuda(1); }}),
    FactoryName);

}  // namespace
}  // namespace ferry::testing
