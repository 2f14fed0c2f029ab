#include "ferry/backends/remote/testing/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ferry::remote::testing {

std::string WorkerBinary() {
  if (const char* env = std::getenv("FERRY_WORKER_BIN")) return env;
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string root = srcdir != nullptr ? srcdir : ".";
  for (const char* candidate : {"/ferry/backends/remote/ferry_worker",
                                "/__main__/backends/remote/ferry_worker"}) {
    const std::string path = root + candidate;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "backends/remote/ferry_worker";
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    std::vector<std::string> args) {
  setenv("FERRY_WORKER_TOKEN", kTestToken, /*overwrite=*/1);
  const std::string binary = WorkerBinary();
  // Peers on this host: the workers a test starts send to each other.
  std::vector<std::string> argv = {binary, "--listen=127.0.0.1:0",
                                   "--peers=127.0.0.1"};
  argv.insert(argv.end(), args.begin(), args.end());
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // A test that dies (a failed check, a timeout) takes its workers along
    // instead of leaving them holding its output open. (The signal follows
    // the forking thread: start workers from a thread that outlives them.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  close(out[1]);
  std::unique_ptr<WorkerProcess> process(new WorkerProcess());
  process->pid_ = pid;
  // Wait for "ferry_worker listening on HOST:PORT ...".
  std::string line;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (line.find('\n') == std::string::npos && absl::Now() < deadline) {
    pollfd pfd = {out[0], POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  const size_t at = line.find("listening on ");
  const size_t space =
      at == std::string::npos ? std::string::npos : line.find(' ', at + 13);
  const size_t colon =
      at == std::string::npos ? std::string::npos : line.rfind(':', space);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(line.substr(colon + 1, space - colon - 1),
                        &process->port_)) {
    return absl::UnavailableError(absl::StrCat(
        "ferry_worker (", binary, ") did not start: '", line, "'"));
  }
  return process;
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    // A clean stop, else a kill.
    for (int i = 0; i < 50; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      usleep(20000);
    }
    Kill();
  }
}

void WorkerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string WorkerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string WorkerProcess::Device(absl::string_view device) const {
  return absl::StrCat("remote:", address(), "/", device);
}

}  // namespace ferry::remote::testing
