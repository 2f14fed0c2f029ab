// The remote backend runs the backend conformance suite against a
// ferry_worker process on this machine, over whatever UCX_TLS the test
// target sets (loopback TCP, shared memory), on its CPU and on a
// simulated device.
#include <memory>
#include <string>

#include "ferry/backends/remote/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

using remote::testing::WorkerProcess;

// One worker for the whole binary, and its devices.
absl::StatusOr<Device*> RemoteDevice(const std::string& device) {
  static absl::StatusOr<std::unique_ptr<WorkerProcess>>* worker =
      new absl::StatusOr<std::unique_ptr<WorkerProcess>>(
          WorkerProcess::Start({"--devices=cpu,sim0"}));
  if (!worker->ok()) return worker->status();
  static std::map<std::string, Device*>* devices =
      new std::map<std::string, Device*>;
  auto it = devices->find(device);
  if (it != devices->end()) return it->second;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Device> made,
                         MakeRemoteDevice((**worker)->address() + "/" + device));
  Device* raw = made.release();  // Lives for the binary, like registry ones.
  (*devices)[device] = raw;
  return raw;
}

absl::StatusOr<std::unique_ptr<Backend>> Create(const std::string& device) {
  FERRY_ASSIGN_OR_RETURN(Device * d, RemoteDevice(device));
  return d->CreateBackend(device == "cpu" ? "threads=1" : "");
}

FERRY_INSTANTIATE_CONFORMANCE(
    Remote,
    ConformanceBackend{.name = "remote_cpu",
                       .create = [] { return Create("cpu"); }},
    ConformanceBackend{.name = "remote_sim",
                       .create = [] { return Create("sim0"); }});

}  // namespace
}  // namespace ferry::testing
