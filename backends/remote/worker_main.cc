// ferry_worker: serves this machine's devices to ferry programs elsewhere.
//
//   ferry_worker --token_file=~/.ferry_token --listen=0.0.0.0:7000
//       --devices=cpu,sim0 --peers=10.0.0.3,10.0.0.4 [--weights_dir=/models]
//       [--idle_spin_us=100] [quota flags, see --help and docs/SECURITY.md]
//
// Clients name its devices "remote:HOST:7000/cpu" in their device lists.
// Prints "ferry_worker listening on HOST:PORT" once it accepts connections
// (with --listen=...:0, the port it got). Stops on SIGINT/SIGTERM.
#include <sys/stat.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/backends/remote/worker/worker_server.h"

namespace {

ferry::remote::WorkerServer* g_server = nullptr;

void OnSignal(int) {
  if (g_server != nullptr) g_server->Stop();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "ferry_worker: %s\n", message.c_str());
  return 2;
}

// The token in `path`: a file only its owner may read (the token's first
// line; surrounding whitespace dropped).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("--token_file ", path, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "--token_file %s: mode %o lets others read it (chmod 600 it)", path,
        st.st_mode & 0777));
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file ", path, ": no token in it"));
  }
  return std::string(absl::StripAsciiWhitespace(line));
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
  std::string token_file;
  std::string peers;
  // Quotas (WorkerQuotas), by flag name.
  ferry::remote::WorkerOptions options;
  ferry::remote::WorkerQuotas& q = options.quotas;
  struct IntFlag {
    const char* name;
    int64_t* value;
  };
  int64_t max_sessions = q.max_sessions,
          max_pending = q.max_pending_connections,
          hello_timeout_ms = absl::ToInt64Milliseconds(q.hello_timeout),
          max_session_buffers = q.max_session_buffers, max_session_bytes = 0,
          max_worker_bytes = 0, max_session_streams = q.max_session_streams,
          max_worker_streams = q.max_worker_streams,
          max_session_threads = q.max_session_threads,
          max_worker_threads = q.max_worker_threads,
          max_held_bytes = static_cast<int64_t>(q.max_held_bytes),
          max_session_transfers = q.max_session_transfers,
          max_session_graph_bytes =
              static_cast<int64_t>(q.max_session_graph_bytes),
          max_staging_bytes = static_cast<int64_t>(q.max_staging_bytes);
  const IntFlag int_flags[] = {
      {"max_sessions", &max_sessions},
      {"max_pending_connections", &max_pending},
      {"hello_timeout_ms", &hello_timeout_ms},
      {"max_session_buffers", &max_session_buffers},
      {"max_session_bytes", &max_session_bytes},
      {"max_worker_bytes", &max_worker_bytes},
      {"max_session_streams", &max_session_streams},
      {"max_worker_streams", &max_worker_streams},
      {"max_session_threads", &max_session_threads},
      {"max_worker_threads", &max_worker_threads},
      {"max_held_bytes", &max_held_bytes},
      {"max_session_transfers", &max_session_transfers},
      {"max_session_graph_bytes", &max_session_graph_bytes},
      {"max_staging_bytes", &max_staging_bytes},
  };
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
        value("client_timeout_ms", &client_timeout_ms) ||
        value("token_file", &token_file) || value("peers", &peers)) {
      continue;
    }
    bool matched = false;
    for (const IntFlag& flag : int_flags) {
      std::string text;
      if (!value(flag.name, &text)) continue;
      matched = true;
      if (!absl::SimpleAtoi(text, flag.value) || *flag.value < 0) {
        return Fail(
            absl::StrCat("--", flag.name, " wants a count, not '", text, "'"));
      }
    }
    if (matched) continue;
    if (arg == "--help") {
      std::printf(
          "ferry_worker --listen=HOST:PORT --devices=cpu,sim0 "
          "[--token_file=F | FERRY_WORKER_TOKEN=T]\n"
          "  [--peers=HOST[:PORT],...] [--weights_dir=DIR] [--sim=SIMCONFIG]\n"
          "  [--idle_spin_us=100] [--client_timeout_ms=30000]\n"
          "The token (16 bytes at least) comes from --token_file (a file\n"
          "only its owner can read) or FERRY_WORKER_TOKEN; --token=T shows\n"
          "it to every user of the host (ps) and is for tests.\n"
          "--peers: the workers this one may send tensors (and so its\n"
          "token) to; none by default.\n"
          "Quotas (docs/SECURITY.md): --max_sessions=64\n"
          "  --max_pending_connections=16 --hello_timeout_ms=5000\n"
          "  --max_session_buffers=16384 --max_session_bytes=0\n"
          "  --max_worker_bytes=0 (0: the devices' memory)\n"
          "  --max_session_streams=64 --max_worker_streams=512\n"
          "  --max_session_threads=256 --max_worker_threads=1024\n"
          "  --max_held_bytes=67108864 --max_session_transfers=4096\n"
          "  --max_session_graph_bytes=268435456\n"
          "  --max_staging_bytes=1073741824\n"
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
  if (!token_file.empty()) {
    absl::StatusOr<std::string> read = ReadTokenFile(token_file);
    if (!read.ok()) return Fail(read.status().ToString());
    token = *std::move(read);
  }
  q.max_sessions = static_cast<int>(std::min<int64_t>(max_sessions, 1 << 20));
  q.max_pending_connections =
      static_cast<int>(std::min<int64_t>(max_pending, 1 << 20));
  q.hello_timeout = absl::Milliseconds(hello_timeout_ms);
  q.max_session_buffers = max_session_buffers;
  q.max_session_bytes = static_cast<uint64_t>(max_session_bytes);
  q.max_worker_bytes = static_cast<uint64_t>(max_worker_bytes);
  q.max_session_streams =
      static_cast<int>(std::min<int64_t>(max_session_streams, 1 << 20));
  q.max_worker_streams =
      static_cast<int>(std::min<int64_t>(max_worker_streams, 1 << 20));
  q.max_session_threads =
      static_cast<int>(std::min<int64_t>(max_session_threads, 1 << 20));
  q.max_worker_threads =
      static_cast<int>(std::min<int64_t>(max_worker_threads, 1 << 20));
  q.max_held_bytes = static_cast<uint64_t>(max_held_bytes);
  q.max_session_transfers =
      static_cast<int>(std::min<int64_t>(max_session_transfers, 1 << 20));
  q.max_session_graph_bytes = static_cast<uint64_t>(max_session_graph_bytes);
  q.max_staging_bytes = static_cast<uint64_t>(max_staging_bytes);
  for (absl::string_view peer :
       absl::StrSplit(peers, ',', absl::SkipWhitespace())) {
    options.peers.emplace_back(peer);
  }
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
