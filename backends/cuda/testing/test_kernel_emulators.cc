// Registers with the fake CUDA runtime the emulations of test_kernels.h's
// kernels: the empty kernel does nothing, the spin kernel sleeps for its
// time, the illegal write touches an address outside every allocation (the
// fake faults it as a GPU would). Testonly; registers at static
// initialization.
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"
#include "ferry/backends/cuda/testing/test_kernels.h"

namespace ferry::cuda_testing {
namespace {

using ::ferry::fake_cuda::AddressTranslator;
using ::ferry::fake_cuda::KernelRun;
using ::ferry::fake_cuda::LaunchShape;

absl::StatusOr<KernelRun> BindEmpty(void** /*params*/,
                                    const LaunchShape& /*shape*/) {
  KernelRun run;
  run.run = [](const AddressTranslator&) { return absl::OkStatus(); };
  return run;
}

absl::StatusOr<KernelRun> BindSpin(void** params,
                                   const LaunchShape& /*shape*/) {
  const int64_t nanoseconds = *static_cast<const int64_t*>(params[0]);
  KernelRun run;
  run.run = [nanoseconds](const AddressTranslator&) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(nanoseconds));
    return absl::OkStatus();
  };
  return run;
}

absl::StatusOr<KernelRun> BindIllegalWrite(void** params,
                                           const LaunchShape& shape) {
  float* bad = *static_cast<float* const*>(params[0]);
  KernelRun run;
  run.accesses.push_back({bad, shape.block.x * sizeof(float), /*write=*/true});
  run.run = [](const AddressTranslator&) {
    return absl::InternalError("unreachable: the fake faults first");
  };
  return run;
}

[[maybe_unused]] const bool registered = [] {
  fake_cuda::RegisterKernelEmulator(EmptyKernelAddress(), &BindEmpty);
  fake_cuda::RegisterKernelEmulator(SpinKernelAddress(), &BindSpin);
  fake_cuda::RegisterKernelEmulator(IllegalWriteKernelAddress(),
                                    &BindIllegalWrite);
  return true;
}();

}  // namespace
}  // namespace ferry::cuda_testing
