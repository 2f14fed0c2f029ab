// The remote backend runs the backend conformance suite against a
// ferry_worker process on this machine, over the UCX transports the target
// names (loopback TCP, or TCP with cross-memory attach for bulk bytes) and
// with the client's loop driven by its waiting threads or not, on the
// worker's CPU and on a simulated device.
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "ferry/backends/remote/client/remote_device.h"
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

// True if this process may read its own memory by cross-memory attach
// (seccomp and ptrace policies can forbid it; UCX then leaves cma out).
bool CrossMemoryAttachAllowed() {
  char from[8] = "ferry";
  char to[8] = {};
  iovec local = {to, sizeof(to)};
  iovec remote = {from, sizeof(from)};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof(to)) &&
         std::strcmp(to, "ferry") == 0;
}

// The connection runs on the transports the target asks for, not TCP
// whatever UCX_TLS says (as UCX 1.13 did for ferry's endpoints on one host
// until cross-memory attach was enabled for them).
TEST(RemoteTransportsTest, TheConnectionUsesTheTransportsTheTargetNames) {
  const char* expected = std::getenv("FERRY_EXPECT_TRANSPORTS");
  ASSERT_NE(expected, nullptr) << "the target sets FERRY_EXPECT_TRANSPORTS";
  auto device = RemoteDevice("cpu");
  ASSERT_TRUE(device.ok()) << device.status();
  auto transports = GetRemoteTransports(**device);
  ASSERT_TRUE(transports.ok()) << transports.status();
  if (*transports != expected &&
      std::string(expected).find("cma") != std::string::npos &&
      !CrossMemoryAttachAllowed()) {
    GTEST_SKIP() << "cross-memory attach is not permitted on this host ("
                 << std::strerror(errno) << "): the connection runs on "
                 << *transports;
  }
  EXPECT_EQ(*transports, expected);
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
