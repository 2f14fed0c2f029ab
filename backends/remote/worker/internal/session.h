// The records of a worker's sessions: a session (what one client holds on
// the worker: buffers, streams, graphs, gates, transfers, commands that
// came ahead of their turn, its quotas' counts), its buffers, streams,
// graphs and transfers, and a connection to a peer worker. Plain data; the
// server (worker_impl.h) keeps them on its loop thread. Thread-compatible.
#ifndef FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_SESSION_H_
#define FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_SESSION_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/worker/worker_server.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote::worker_internal {

// Bytes of an incoming message: copied eager bytes, or a rendezvous
// descriptor the receiver pulls into place.
struct Incoming {
  std::string bytes;
  void* desc = nullptr;
  size_t length = 0;
};

// A buffer the session allocated, with a tensor covering all of it (the
// handle local backends transfer through).
struct BufferRec {
  uint64_t id = 0;
  uint32_t device = 0;
  // Of the device's weights type, when that is not its default: transfers
  // name their tensor (a tensor ref), copies between buffers are refused.
  bool weights = false;
  std::unique_ptr<Buffer> buffer;
  Tensor whole;
  ucp_mem_h mem = nullptr;  // UCX registration of host memory.
  ucp_context_h context = nullptr;
  ~BufferRec() {
    if (mem != nullptr) ucp_mem_unmap(context, mem);
  }
  bool is_host() const { return buffer->is_host(); }
  char* host(uint64_t offset) const {
    return static_cast<char*>(buffer->base()) + offset;
  }
};

struct StreamRec {
  uint64_t id = 0;
  int threads = 1;  // Counted against the quotas.
  uint32_t device = 0;
  std::unique_ptr<Backend> backend;
  // Client value -> what it covers: the local event and the gates then
  // pending.
  std::map<uint64_t, std::vector<Event>> records;
  uint64_t last_value = 0;
  // Gates the stream's later local work must wait for, not yet given to the
  // local backend: transfers on an idle stream then never wake its thread.
  std::vector<Event> pending;
};

struct GraphRec {
  uint32_t device = 0;
  uint64_t bytes = 0;  // Its encoding's, against the session's quota.
  std::unique_ptr<WireGraph> graph;
  std::vector<std::shared_ptr<BufferRec>> buffers;  // Kept alive.
};

// Bytes from a peer for one of this session's buffers.
struct TransferRec {
  std::shared_ptr<BufferRec> buffer;
  std::shared_ptr<Buffer> staging;  // For device memory.
  char* dst = nullptr;              // Where the bytes land.
  uint64_t size = 0;
  uint64_t stream = 0;
  std::shared_ptr<TimelineSemaphore> gate;
  bool ready = false;  // The stream passed the work before the copy.
  bool arrived = false;
  absl::Status peer_status;
  Incoming data;
  absl::Time deadline;
};

struct EarlyPeerData {
  absl::Status status;
  Incoming data;
};

struct Session;
using SessionPtr = std::shared_ptr<Session>;

struct Held {
  Message m;
  Incoming in;
  uint64_t bytes = 0;  // Counted against the session's held bytes.
};

struct Session {
  uint64_t id = 0;
  // What a peer must present to deliver bytes into this session: only its
  // client learns it (the hello reply), and passes it to the sending worker.
  Capability cap = {0, 0};
  Role role = Role::kClient;
  ucp_ep_h ep = nullptr;
  bool closed = false;
  absl::Time last_heard;  // Any message from its endpoint.
  uint64_t next_seq = 1;
  std::map<uint64_t, Held> held;  // Commands that came early.
  uint64_t next_id = 1;
  std::map<uint64_t, std::shared_ptr<BufferRec>> buffers;
  std::map<uint64_t, std::shared_ptr<StreamRec>> streams;
  std::map<uint64_t, std::shared_ptr<GraphRec>> graphs;
  std::map<uint64_t, std::shared_ptr<TimelineSemaphore>> gates;
  std::map<uint64_t, std::shared_ptr<TransferRec>> transfers;
  std::map<uint64_t, EarlyPeerData> early_peer_data;
  std::string blob_parts;     // kBlobPart bytes for the next blob command.
  bool tracing = false;       // kTrace 1 received (and no kTrace 0 since).
  int64_t trace_from_ns = 0;  // Spans from here are the next kTraceSpans'.
  // The span names of its graphs' nodes: kTraceSpans returns only spans so
  // named, never another session's op and tensor names.
  absl::flat_hash_set<std::string> span_names;
  WorkerStats stats;  // Its own counters (kStats).
  // Against its quotas (WorkerQuotas).
  uint64_t bytes = 0;        // Of its buffers.
  int threads = 0;           // Of its streams.
  uint64_t held_bytes = 0;   // Of commands ahead of their turn.
  uint64_t graph_bytes = 0;  // Of its graphs' encodings.
};

// A connection to another worker, for kSendToPeer.
struct Peer {
  std::string address;
  ucp_ep_h ep = nullptr;
  bool ready = false;
  absl::Time deadline;  // For its hello's answer.
  absl::Status failed;
  std::deque<absl::AnyInvocable<void(absl::Status) &&>> waiting;
};

}  // namespace ferry::remote::worker_internal

#endif  // FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_SESSION_H_
