// WorkerServer: the heart of `ferry_worker`. Serves local devices (cpu, sim,
// cuda) to remote clients over a UCX listener.
//
// A client connects, proves it knows the token (kHello, before anything
// else), and gets a session: buffers it allocates on the worker's devices,
// streams (a local Backend each), graphs it defined, gates and transfers.
// Everything is bounds-checked against the session's own records; a bad
// command gets an error reply (or fails the stream it was for) and never
// touches memory outside a buffer. Stream work is queued on the local
// backends and never blocks the loop: incoming bytes land in the buffer
// once the stream has passed the work before them (a gate on the local
// stream holds the work after), outgoing bytes are sent once the stream
// has produced them. Another worker (a peer, same token) delivers a
// split input straight into a buffer with kPeerData. A session whose
// client goes away releases everything once its streams have drained.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_WORKER_SERVER_H_
#define FERRY_BACKENDS_REMOTE_WORKER_WORKER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ferry/backends/device.h"

namespace ferry::remote {

// What one session, and all sessions together, may hold. Past a limit the
// command gets ResourceExhausted (a stream's work: its stream fails) and the
// worker serves on. SECURITY.md lists them with the flags that set them.
struct WorkerQuotas {
  int max_sessions = 64;
  // Connections that have not yet said hello, and how long one may wait.
  int max_pending_connections = 16;
  absl::Duration hello_timeout = absl::Seconds(5);
  int64_t max_session_buffers = 16384;
  // Buffer bytes; 0: the served devices' memory together.
  uint64_t max_session_bytes = 0;
  uint64_t max_worker_bytes = 0;
  int max_session_streams = 64;
  int max_worker_streams = 512;
  // Threads of streams (a cpu stream's threads=N, plus its own).
  int max_session_threads = 256;
  int max_worker_threads = 1024;
  // Commands (and their bytes) that came ahead of their turn.
  uint64_t max_held_bytes = uint64_t{64} << 20;
  // Receives from peers not yet done.
  int max_session_transfers = 4096;
  // Encoded graphs a session keeps defined (kDefineGraph's bytes).
  uint64_t max_session_graph_bytes = uint64_t{256} << 20;
  // Pinned host memory for bytes on their way to or from device memory,
  // over all sessions.
  uint64_t max_staging_bytes = uint64_t{1} << 30;
  // A peer worker that has not answered its hello in this time fails the
  // sends that wait for it.
  absl::Duration peer_connect_timeout = absl::Seconds(10);
};

struct WorkerOptions {
  std::string host = "0.0.0.0";  // Address to listen on.
  int port = 0;                  // 0: any free port (see port()).
  std::string token;  // Clients and peers must present it (16 bytes at least).
  // Where kSendToPeer may connect (and so send the token): "HOST" (any
  // port) or "HOST:PORT", as clients name the receiving worker. Empty:
  // worker-to-worker copies are refused.
  std::vector<std::string> peers;
  WorkerQuotas quotas;
  std::vector<Device*> devices;  // Served, as device 0, 1, ... by name.
  // Root for kLoadFile (worker-local weights); empty refuses every load.
  std::string weights_dir;
  // How long a stream waits for a peer's bytes before failing.
  absl::Duration transfer_timeout = absl::Seconds(60);
  // How long the loop keeps polling after traffic before it sleeps
  // (UcxLoop::SetIdleSpin; 0 to 1 s): the next command then needs no
  // wake-up. 100 us took a 4 KiB round trip from 37-44 us to 20-25 us on 2
  // cores.
  absl::Duration idle_spin = absl::Microseconds(100);
  // A client silent this long (2 s at least) is taken for gone and its
  // session freed (clients ping every second; a hung client keeps its
  // connection open).
  absl::Duration client_timeout = absl::Seconds(30);
  // Threads that open and read files (kLoadFile) and resolve peer names,
  // off the loop; loads queued past `max_queued_loads` are refused.
  int blocking_threads = 2;
  size_t max_queued_loads = 256;
};

// Counters, for tests and benchmarks. kStats answers a session with its own
// (of the worker's, only `sessions`).
struct WorkerStats {
  int64_t client_bytes_in = 0;   // Tensor bytes from clients.
  int64_t client_bytes_out = 0;  // Tensor bytes to clients.
  int64_t peer_bytes_in = 0;     // From other workers.
  int64_t peer_bytes_out = 0;    // To other workers.
  int64_t sessions = 0;          // Open sessions.
  int64_t buffers = 0;           // Live buffers over all sessions.
  int64_t graphs_defined = 0;    // kDefineGraph commands accepted.
};

class WorkerServer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Create(
      WorkerOptions options);
  ~WorkerServer();

  int port() const;
  // Serves on the calling thread until Stop().
  void Run();
  // Thread-safe.
  void Stop();

 private:
  class Impl;
  explicit WorkerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_WORKER_WORKER_SERVER_H_
