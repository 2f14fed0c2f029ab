// The CUDA backend runs the backend conformance suite on cuda0 (and cuda1
// where present); without a GPU every test skips, saying why, except under
// --config=gpu, where cuda0's fail.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "ferry/backends/cuda/cuda_device.h"
#include "ferry/backends/cuda/cuda_probe.h"
#include "ferry/backends/cuda/testing/cuda_test_util.h"
#include "ferry/backends/registry.h"
#include "ferry/tests/conformance/conformance.h"

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

std::map<std::string, std::string> CudaExpectedFailures() {
  return {{"ComputeConformanceTest.TracingRecordsOneSpanPerComputeNode",
           "no per-node trace spans yet (they need CUDA events around each "
           "kernel, read back off the compute stream)"},
          {"EventConformanceTest.EventsNameTheirDevice",
           "an event recorded behind a host-held wait has no CUDA event "
           "until the wait clears, so WaitMode answers kHost for it and a "
           "wait on it is held on the host until it completes (it could "
           "wait for the event's issue instead)"}};
}

FERRY_INSTANTIATE_CONFORMANCE(Cuda,
                              ConformanceBackend{
                                  .name = "cuda0",
                                  .create = [] { return MakeCuda(0); },
                                  .expected_failures = CudaExpectedFailures(),
                                  // cuda1 skips on a one-GPU machine.
                                  .required_under_gpu_config = true},
                              ConformanceBackend{
                                  .name = "cuda1",
                                  .create = [] { return MakeCuda(1); },
                                  .expected_failures = CudaExpectedFailures()});

}  // namespace
}  // namespace ferry::testing
