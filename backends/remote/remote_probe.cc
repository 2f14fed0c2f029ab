// remote_probe: checks that a ferry worker answers and measures the link to
// it: a round trip, upload/download bandwidth of a tensor, and with --to the
// copy from it straight to another worker's device.
//
//   FERRY_WORKER_TOKEN=secret remote_probe --device=remote:10.0.0.2:7000/cpu
//       [--to=remote:10.0.0.3:7000/cpu] [--mib=64] [--iters=5]
// Prints one line ("PROBE ... upload MB/s=... transports=..."), or why a
// step failed and exits 1.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/graph/context.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(const std::string& name, const std::string& to, int64_t mib,
        int iters) {
  ferry::Registry& registry = ferry::Registry::Global();
  if (!ferry::RegisterRemoteFamily(registry).ok()) return 1;
  auto list = registry.CreateBackends(to.empty() ? name : name + "," + to);
  if (!list.ok()) {
    std::fprintf(stderr, "remote_probe: %s\n",
                 list.status().ToString().c_str());
    return 1;
  }
  ferry::Backend& backend = *list->backends[0];
  ferry::Device& device = backend.device();
  const int64_t bytes = mib << 20;
  ferry::Context ctx;
  auto t = ctx.NewTensor(ferry::DType::kF32, {bytes / 4}, "probe");
  auto small = ctx.NewTensor(ferry::DType::kF32, {1024}, "small");
  auto buffer = device.default_buffer_type()->Allocate(bytes + 8192);
  auto host = device.host_buffer_type()->Allocate(bytes);
  // Prints why a step failed; true if it did.
  auto failed = [](const char* what, absl::Status status) {
    if (status.ok()) return false;
    std::fprintf(stderr, "remote_probe: %s: %s\n", what,
                 status.ToString().c_str());
    return true;
  };
  if (failed("tensor", t.status()) || failed("tensor", small.status()) ||
      failed("worker buffer", buffer.status()) ||
      failed("pinned buffer", host.status()) ||
      failed("placing", ferry::PlaceTensor(**buffer, **t, 0)) ||
      failed("placing", ferry::PlaceTensor(**buffer, **small, bytes))) {
    return 1;
  }
  std::vector<double> up, down, rtt;
  for (int i = 0; i < iters; ++i) {
    absl::Time start = absl::Now();
    if (failed("upload",
               backend.EnqueueSetTensor(**t, (*host)->base(), 0, bytes)) ||
        failed("upload", backend.Synchronize())) {
      return 1;
    }
    up.push_back(bytes / 1e6 / absl::ToDoubleSeconds(absl::Now() - start));
    start = absl::Now();
    if (failed("download",
               backend.EnqueueGetTensor(**t, (*host)->base(), 0, bytes)) ||
        failed("download", backend.Synchronize())) {
      return 1;
    }
    down.push_back(bytes / 1e6 / absl::ToDoubleSeconds(absl::Now() - start));
    for (int j = 0; j < 100; ++j) {
      start = absl::Now();
      if (failed("round trip",
                 backend.EnqueueGetTensor(**small, (*host)->base(), 0, 4096)) ||
          failed("round trip", backend.Synchronize())) {
        return 1;
      }
      rtt.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
    }
  }
  std::string peer_figure;
  if (!to.empty()) {
    ferry::Backend& peer = *list->backends[1];
    auto peer_buffer = peer.device().default_buffer_type()->Allocate(bytes);
    auto peer_t = ctx.NewTensor(ferry::DType::kF32, {bytes / 4}, "probe_to");
    if (failed("buffer on --to", peer_buffer.status()) ||
        failed("tensor", peer_t.status()) ||
        failed("placing", ferry::PlaceTensor(**peer_buffer, **peer_t, 0))) {
      return 1;
    }
    std::vector<double> copy;
    for (int i = 0; i < iters; ++i) {
      const absl::Time start = absl::Now();
      // The sending side first, as a pipeline's later work there would
      // wait for it: out of device memory it is past the copy once the
      // bytes are staged, and a failure to send must still reach the
      // receiving side.
      if (failed("copy to --to",
                 peer.EnqueueCopyTensor(backend, **t, **peer_t)) ||
          failed("copy to --to, sending side", backend.Synchronize()) ||
          failed("copy to --to", peer.Synchronize())) {
        return 1;
      }
      copy.push_back(bytes / 1e6 / absl::ToDoubleSeconds(absl::Now() - start));
    }
    peer_figure = absl::StrCat(" to ", to, " MB/s=", Median(copy));
  }
  auto transports = ferry::GetRemoteTransports(device);
  std::printf(
      "PROBE %s upload MB/s=%.1f download MB/s=%.1f rtt4k_us=%.1f%s "
      "transports=%s\n",
      name.c_str(), Median(up), Median(down), Median(rtt), peer_figure.c_str(),
      transports.ok() ? transports->c_str() : "?");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device;
  std::string to;
  int64_t mib = 64;
  int iters = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--device=", 0) == 0) {
      device = arg.substr(9);
    } else if (arg.rfind("--to=", 0) == 0) {
      to = arg.substr(5);
    } else if (arg.rfind("--mib=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(6), &mib) || mib <= 0) return 2;
    } else if (arg.rfind("--iters=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(8), &iters) || iters <= 0) return 2;
    } else {
      std::fprintf(stderr, "remote_probe: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (device.empty()) {
    std::fprintf(stderr,
                 "usage: remote_probe --device=remote:HOST:PORT/DEV "
                 "[--to=remote:HOST:PORT/DEV] [--mib=N] [--iters=N]\n");
    return 2;
  }
  return Run(device, to, mib, iters);
}
