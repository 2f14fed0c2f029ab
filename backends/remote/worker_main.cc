// ferry_worker: serves this machine's devices to ferry programs elsewhere.
//
//   FERRY_WORKER_TOKEN=secret ferry_worker --listen=0.0.0.0:7000
//       --devices=cpu,sim0 [--weights_dir=/models] [--idle_spin_us=100]
//
// Clients name its devices "remote:HOST:7000/cpu" in their device lists.
// Prints "ferry_worker listening on HOST:PORT" once it accepts connections
// (with --listen=...:0, the port it got). Stops on SIGINT/SIGTERM.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/remote/address.h"
#include "ferry/backends/remote/worker_server.h"

namespace {

ferry::remote::WorkerServer* g_server = nullptr;

void OnSignal(int) {
  if (g_server != nullptr) g_server->Stop();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "ferry_worker: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "0.0.0.0:7000";
  std::string devices = "cpu";
  std::string token;
  std::string weights_dir;
  std::string sim_options;
  std::string idle_spin_us = "100";
  std::string client_timeout_ms = "30000";
  if (const char* env = std::getenv("FERRY_WORKER_TOKEN")) token = env;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](absl::string_view flag, std::string* out) {
      const std::string prefix = absl::StrCat("--", flag, "=");
      if (arg.rfind(prefix, 0) != 0) return false;
      *out = arg.substr(prefix.size());
      return true;
    };
    if (value("listen", &listen) || value("devices", &devices) ||
        value("token", &token) || value("weights_dir", &weights_dir) ||
        value("sim", &sim_options) || value("idle_spin_us", &idle_spin_us) ||
        value("client_timeout_ms", &client_timeout_ms)) {
      continue;
    }
    if (arg == "--help") {
      std::printf(
          "ferry_worker --listen=HOST:PORT --devices=cpu,sim0 [--token=T | "
          "FERRY_WORKER_TOKEN=T] [--weights_dir=DIR] [--sim=SIMCONFIG]\n"
          "  [--idle_spin_us=100] [--client_timeout_ms=30000]\n"
          "Backend params (threads=N) come from each client's stream.\n"
          "--idle_spin_us: how long to poll after traffic before sleeping\n"
          "(shorter round trips; 0 leaves the core to others at once).\n"
          "--client_timeout_ms: a client silent this long is taken for gone\n"
          "and its session freed (clients ping every second).\n");
      return 0;
    }
    return Fail(absl::StrCat("unknown argument '", arg, "' (see --help)"));
  }
  absl::StatusOr<ferry::remote::HostPort> address =
      listen.size() > 2 && listen.substr(listen.size() - 2) == ":0"
          ? absl::StatusOr<ferry::remote::HostPort>(
                ferry::remote::HostPort{listen.substr(0, listen.size() - 2), 0})
          : ferry::remote::ParseHostPort(listen);
  if (!address.ok()) return Fail(std::string(address.status().message()));
  // Ranges are WorkerServer::Create's to check.
  int64_t spin_us = 0, timeout_ms = 0;
  if (!absl::SimpleAtoi(idle_spin_us, &spin_us)) {
    return Fail(absl::StrCat("--idle_spin_us wants microseconds, not '",
                             idle_spin_us, "'"));
  }
  if (!absl::SimpleAtoi(client_timeout_ms, &timeout_ms)) {
    return Fail(absl::StrCat("--client_timeout_ms wants milliseconds, not '",
                             client_timeout_ms, "'"));
  }
  ferry::Registry& registry = ferry::Registry::Global();
  absl::Status status = ferry::RegisterLinkedDevices(registry);
  if (!status.ok()) return Fail(status.ToString());
  ferry::CreateBackendsOptions create;
  if (!sim_options.empty()) create.family_options["sim"] = sim_options;
  absl::StatusOr<ferry::BackendList> list =
      registry.CreateBackends(devices, create);
  if (!list.ok()) return Fail(list.status().ToString());
  ferry::remote::WorkerOptions options;
  options.host = address->host;
  options.port = address->port;
  options.token = token;
  options.weights_dir = weights_dir;
  options.idle_spin = absl::Microseconds(spin_us);
  options.client_timeout = absl::Milliseconds(timeout_ms);
  for (ferry::Backend* backend : list->backends) {
    options.devices.push_back(&backend->device());
  }
  absl::StatusOr<std::unique_ptr<ferry::remote::WorkerServer>> server =
      ferry::remote::WorkerServer::Create(std::move(options));
  if (!server.ok()) return Fail(server.status().ToString());
  g_server = server->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::printf("ferry_worker listening on %s:%d serving %s\n",
              address->host.c_str(), (*server)->port(), devices.c_str());
  std::fflush(stdout);
  (*server)->Run();
  g_server = nullptr;
  return 0;
}
