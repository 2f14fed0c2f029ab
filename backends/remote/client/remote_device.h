// The client side of remote devices: a device on a ferry worker, used like
// a local one ("remote:HOST:PORT/sim0" in a device list).
//
//   FERRY_RETURN_IF_ERROR(RegisterRemoteFamily(Registry::Global()));
//   auto list = Registry::Global().CreateBackends(
//       "remote:10.0.0.2:7000/cpu,remote:10.0.0.3:7000/cpu,cpu");
//
// One Connection per worker (and token) carries every device, buffer and
// stream the process has there, over one UCX endpoint driven by one
// progress thread. Buffers live on the worker (RemoteBuffer's addresses
// are opaque); a RemoteBackend is a stream on the worker: everything it
// enqueues is a message and returns at once. Events are values of the
// stream's timeline, signalled when the worker reports them (and, for
// downloads, when the bytes have landed here); waits on events of the same
// worker stay on the worker. A copy from a buffer on another worker goes
// directly from that worker to this one. A split's nodes are sent once
// (kDefineGraph) and launched by id while they do not change.
//
// The token comes from the family options ("token=...") or the
// FERRY_WORKER_TOKEN environment variable. A worker that dies or stops
// answering (FERRY_REMOTE_DEADLINE_MS, default 10000) fails every stream
// and event of its connection with Unavailable naming it; the next backend
// made on its devices connects afresh.
#ifndef FERRY_BACKENDS_REMOTE_CLIENT_REMOTE_DEVICE_H_
#define FERRY_BACKENDS_REMOTE_CLIENT_REMOTE_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/device.h"
#include "ferry/backends/registry.h"
#include "ferry/graph/tensor.h"

namespace ferry {

namespace remote {
class Connection;
}  // namespace remote

// Registers the address family "remote" in `registry`: list items
// "remote:HOST:PORT/DEVICE" connect to that worker and make the device.
// OK if registered already.
absl::Status RegisterRemoteFamily(Registry& registry);

// Makes a remote device named "remote:" + `address` ("HOST:PORT/DEVICE"),
// connecting to the worker. `options`: "token=..." (else the environment).
absl::StatusOr<std::unique_ptr<Device>> MakeRemoteDevice(
    absl::string_view address, absl::string_view options = "");

// Byte counts of what crossed the client's connections (tensor payloads),
// for tests that check worker-to-worker copies bypass the client.
struct RemoteTraffic {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
};
RemoteTraffic GetRemoteTraffic();

// The counters a worker keeps (WorkerStats), asked over `device`'s
// connection: client_in, client_out, peer_in, peer_out, sessions, buffers,
// graphs_defined.
absl::StatusOr<std::vector<int64_t>> GetWorkerStats(Device& device);

// The UCX transports of `device`'s connection, e.g. "cma,tcp" (bulk bytes
// by cross-memory attach to a worker on this host, the rest over TCP) or
// "tcp"; empty if UCX names none.
absl::StatusOr<std::string> GetRemoteTransports(Device& device);

// Queues on `backend` (a remote backend) a read of bytes
// [file_offset, file_offset + size) of `path`, a file under the worker's
// --weights_dir, into `tensor` from byte `offset`: weights load on the
// worker without crossing the network.
absl::Status EnqueueLoadFromWorkerFile(Backend& backend, Tensor& tensor,
                                       size_t offset, size_t size,
                                       absl::string_view path,
                                       uint64_t file_offset);

// True if `device` is a remote device.
bool IsRemoteDevice(const Device& device);

}  // namespace ferry

#endif  // FERRY_BACKENDS_REMOTE_CLIENT_REMOTE_DEVICE_H_
