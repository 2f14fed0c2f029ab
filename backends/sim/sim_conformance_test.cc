// The simulated device runs the backend conformance suite, with its memory
// guarded (host access faults) and with a narrowed op set.
#include <memory>

#include "ferry/backends/sim/sim_device.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tests/conformance/backend_conformance.h"

namespace ferry::testing {
namespace {

// Devices live for the test binary, as registry devices do.
SimDevice& Device(absl::string_view name, absl::string_view config) {
  auto device = SimDevice::Create(std::string(name), config);
  FERRY_CHECK(device.ok());
  return *device->release();
}

INSTANTIATE_TEST_SUITE_P(
    Sim, BackendConformanceTest,
    ::testing::Values(BackendFactory{"sim_guarded",
                                     [] {
                                       static SimDevice& device =
                                           Device("simconf0", "guard=on");
                                       return device.CreateBackend();
                                     }},
                      BackendFactory{"sim_fast_scaled",
                                     [] {
                                       static SimDevice& device = Device(
                                           "simconf1",
                                           "h2d=64GB/s,lat=1us,scale=0.1");
                                       return device.CreateBackend();
                                     }}),
    FactoryName);

}  // namespace
}  // namespace ferry::testing
