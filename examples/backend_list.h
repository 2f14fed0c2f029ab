// The program's backends from its --backends list, the CPU last, and which
// of them has a modelled clock (a sim) to time the run on.
#ifndef FERRY_EXAMPLES_BACKEND_LIST_H_
#define FERRY_EXAMPLES_BACKEND_LIST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/device.h"

namespace ferry::examples {

struct ExampleBackends {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> list;  // In priority order, the CPU last.
  // A device whose clock is modelled (a sim): the run is timed on it.
  const Device* modelled = nullptr;

  // Each device of `list` once, in order.
  std::vector<Device*> Devices() const;
};

// Makes the backends of `spec` ("sim0,sim1,cpu") in the global registry,
// with the linked device families registered; `sim` configures every new
// simulated device, `cpu_threads` > 0 the CPU backend's threads. Errors
// name --backends; the list must end with the CPU.
absl::StatusOr<ExampleBackends> MakeBackends(const std::string& spec,
                                             const std::string& sim,
                                             int cpu_threads);

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_BACKEND_LIST_H_
