// The remote backend runs the backend conformance suite against a
// ferry_worker process on this machine over loopback TCP (with the
// client's loop driven by its waiting threads or not, as the target sets),
// on its CPU and on a simulated device.
#include <map>
#include <memory>
#include <string>

#include "ferry/backends/remote/remote_device.h"
#include "ferry/backends/remote/testing/worker_process.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tests/conformance/conformance.h"

namespace ferry::testing {
namespace {

using remote::testing::WorkerProcess;

// One worker for the whole binary, and its devices; both go when the tests
// are done (so that nothing of UCX's is left for the leak checker).
struct Shared {
  absl::StatusOr<std::unique_ptr<WorkerProcess>> worker =
      WorkerProcess::Start({"--devices=cpu,sim0"});
  std::map<std::string, std::unique_ptr<Device>> devices;
};
Shared* shared = nullptr;

class SharedWorker : public ::testing::Environment {
 public:
  void TearDown() override {
    delete shared;
    shared = nullptr;
  }
};
const auto* const environment =
    ::testing::AddGlobalTestEnvironment(new SharedWorker);

absl::StatusOr<Device*> RemoteDevice(const std::string& device) {
  if (shared == nullptr) shared = new Shared;
  if (!shared->worker.ok()) return shared->worker.status();
  auto it = shared->devices.find(device);
  if (it != shared->devices.end()) return it->second.get();
  FERRY_ASSIGN_OR_RETURN(
      std::unique_ptr<Device> made,
      MakeRemoteDevice((*shared->worker)->address() + "/" + device));
  Device* raw = made.get();
  shared->devices[device] = std::move(made);
  return raw;
}

absl::StatusOr<std::unique_ptr<Backend>> Create(const std::string& device) {
  FERRY_ASSIGN_OR_RETURN(Device * d, RemoteDevice(device));
  return d->CreateBackend(device == "cpu" ? "threads=1" : "");
}

std::map<std::string, std::string> RemoteExpectedFailures() {
  return {{"ComputeConformanceTest.TracingRecordsOneSpanPerComputeNode",
           "the nodes run in the worker process, whose trace stays there: "
           "the client does not fetch the worker's spans yet"}};
}

FERRY_INSTANTIATE_CONFORMANCE(
    Remote,
    ConformanceBackend{.name = "remote_cpu",
                       .create = [] { return Create("cpu"); },
                       .expected_failures = RemoteExpectedFailures()},
    ConformanceBackend{.name = "remote_sim",
                       .create = [] { return Create("sim0"); },
                       .expected_failures = RemoteExpectedFailures()});

}  // namespace
}  // namespace ferry::testing
