// WorkerProcess: a ferry_worker child process for tests on one machine.
//
//   FERRY_ASSERT_OK_AND_ASSIGN(auto worker,
//                              WorkerProcess::Start({"--devices=cpu,sim0"}));
//   std::string list = worker->Device("cpu");  // "remote:127.0.0.1:PORT/cpu"
//
// The binary comes from the test's runfiles (data dependency on
// //backends/remote:ferry_worker) or $FERRY_WORKER_BIN. It listens on a free
// loopback port and inherits the environment (UCX_TLS picks the
// transport). The token is kTestToken, also put in FERRY_WORKER_TOKEN for
// the client side. Kill() ends it abruptly (SIGKILL), as a crash would.
#ifndef FERRY_BACKENDS_REMOTE_TESTING_WORKER_PROCESS_H_
#define FERRY_BACKENDS_REMOTE_TESTING_WORKER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ferry::remote::testing {

inline constexpr char kTestToken[] = "ferry-test-token";

class WorkerProcess {
 public:
  // Starts a worker with `args` (plus --listen and the token).
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      std::vector<std::string> args);
  ~WorkerProcess();

  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:PORT"
  // "remote:127.0.0.1:PORT/<device>".
  std::string Device(absl::string_view device) const;
  void Kill();
  bool running() const { return pid_ > 0; }

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
};

// Path of the ferry_worker binary.
std::string WorkerBinary();

}  // namespace ferry::remote::testing

#endif  // FERRY_BACKENDS_REMOTE_TESTING_WORKER_PROCESS_H_
