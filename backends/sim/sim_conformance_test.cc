// The simulated device runs the backend conformance suite, with its memory
// guarded (host access faults) and fast and time-scaled.
#include <string>

#include "ferry/backends/sim/sim_device.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

// Devices live for the test binary, as registry devices do.
SimDevice& Device(absl::string_view name, absl::string_view config) {
  auto device = SimDevice::Create(std::string(name), config);
  FERRY_CHECK(device.ok());
  return *device->release();
}

FERRY_INSTANTIATE_CONFORMANCE(
    Sim,
    ConformanceBackend{.name = "sim_guarded",
                       .create =
                           [] {
                             static SimDevice& device =
                                 Device("simconf0", "guard=on");
                             return device.CreateBackend();
                           }},
    ConformanceBackend{.name = "sim_fast_scaled", .create = [] {
                         static SimDevice& device =
                             Device("simconf1", "h2d=64GB/s,lat=1us,scale=0.1");
                         return device.CreateBackend();
                       }});

}  // namespace
}  // namespace ferry::testing
