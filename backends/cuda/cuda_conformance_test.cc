// The CUDA backend runs the backend conformance suite on cuda0 (and cuda1
// where present); without a GPU every test skips, saying why.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/registry.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(int ordinal) {
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal >= *count) {
    return absl::UnavailableError(
        absl::StrCat("only ", *count, " CUDA device(s)"));
  }
  static Registry* const registry = [] {
    auto* r = new Registry();
    (void)RegisterCudaFamily(*r);
    return r;
  }();
  const std::string name = absl::StrCat("cuda", ordinal);
  if (!registry->FindDevice(name).ok()) {
    absl::StatusOr<Device*> made = registry->AddDevice("cuda", ordinal);
    if (!made.ok()) return made.status();
  }
  return registry->CreateBackend(name);
}

std::map<std::string, std::string> CudaExpectedFailures() {
  return {{"ComputeConformanceTest.TracingRecordsOneSpanPerComputeNode",
           "no per-node trace spans yet (they need CUDA events around each "
           "kernel, read back off the compute stream)"}};
}

FERRY_INSTANTIATE_CONFORMANCE(Cuda,
                              ConformanceBackend{
                                  .name = "cuda0",
                                  .create = [] { return MakeCuda(0); },
                                  .expected_failures = CudaExpectedFailures()},
                              ConformanceBackend{
                                  .name = "cuda1",
                                  .create = [] { return MakeCuda(1); },
                                  .expected_failures = CudaExpectedFailures()});

}  // namespace
}  // namespace ferry::testing
