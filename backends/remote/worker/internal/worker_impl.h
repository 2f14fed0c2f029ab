// WorkerServer::Impl: the worker's state (sessions, peers, counters, the
// loop) and its methods, declared here by part and defined in the part's
// file: the server (worker_server.cc), the listener and hello
// (listener.cc), the in-order dispatch of commands (dispatch.cc), sessions
// (session.cc), stream gates (stream_gates.cc), one handler per command
// (buffer_commands.cc, stream_commands.cc, graph_commands.cc, tensor_io.cc,
// file_loads.cc, info_commands.cc), peer transfers (peer_transfers.cc).
// Everything runs on the loop's thread. Thread-compatible (Stop() aside).
#ifndef FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_WORKER_IMPL_H_
#define FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_WORKER_IMPL_H_

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/transport/ucx_loop.h"
#include "ferry/backends/remote/worker/blocking_pool.h"
#include "ferry/backends/remote/worker/internal/session.h"
#include "ferry/backends/remote/worker/staging_pool.h"
#include "ferry/backends/remote/worker/worker_server.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote {

class WorkerServer::Impl {
 public:
  explicit Impl(WorkerOptions options) : options_(std::move(options)) {}
  ~Impl();

  absl::Status Start();
  int port() const { return port_; }
  void Run() {
    loop_->Run();
    Shutdown();
  }
  void Stop() { loop_->Stop(); }

 private:
  // The server (worker_server.cc): housekeeping every 200 ms, and the end.
  void Tick();
  void Shutdown();

  // The listener (listener.cc).
  static void OnConnection(ucp_conn_request_h request, void* arg);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void Hello(ucp_ep_h ep, const Message& m);
  void AuthFailed(const std::string& from, absl::string_view why);

  // Dispatch (dispatch.cc).
  static ucs_status_t OnCommand(void* arg, const void* header,
                                size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  ucs_status_t Command(ucp_ep_h ep, absl::string_view header, void* data,
                       size_t length, bool rndv);
  // Processes one in-order command of `s`.
  void Dispatch(const worker_internal::SessionPtr& s, Message& m,
                worker_internal::Incoming& in);
  // Runs the command's handler (below).
  absl::Status Execute(const worker_internal::SessionPtr& s, Message& m,
                       worker_internal::Incoming& in);
  void Reply(const worker_internal::SessionPtr& s, Message reply,
             const void* data = nullptr, size_t size = 0,
             UcxLoop::Done done = nullptr);
  void Result(const worker_internal::SessionPtr& s, uint64_t req,
              const absl::Status& status, uint64_t value = 0);
  void Drop(worker_internal::Incoming& in);
  void Deliver(worker_internal::Incoming in, void* dst, UcxLoop::Done done);

  // Sessions (session.cc).
  absl::StatusOr<worker_internal::StreamRec*> FindStream(
      worker_internal::Session& s, uint64_t id);
  absl::StatusOr<std::shared_ptr<worker_internal::BufferRec>> FindBuffer(
      worker_internal::Session& s, uint64_t id);
  // Buffer `id` of `s` if `device` can use its memory, kept in `held`.
  absl::StatusOr<Buffer*> DeviceBuffer(
      worker_internal::Session& s, const Device& device, uint64_t id,
      std::vector<std::shared_ptr<worker_internal::BufferRec>>* held);
  absl::StatusOr<std::shared_ptr<worker_internal::BufferRec>> FindRange(
      worker_internal::Session& s, const Message& m);
  // Pinned host memory for staging on `device`.
  absl::StatusOr<std::shared_ptr<Buffer>> Staging(uint32_t device, size_t size);
  // Ends a session; `close_ep` false when the process is exiting.
  void CloseSession(const worker_internal::SessionPtr& s, absl::string_view why,
                    bool close_ep = true);

  // Stream gates (stream_gates.cc).
  // Makes later work on `stream` fail with `status`.
  void FailStream(worker_internal::StreamRec& stream, absl::Status status);
  // A gate the stream's later work waits for: pending until local work is
  // enqueued (Flush), or given to the local backend at once (GateNow).
  std::shared_ptr<TimelineSemaphore> Gate(worker_internal::StreamRec& stream);
  std::shared_ptr<TimelineSemaphore> GateNow(
      worker_internal::StreamRec& stream);
  // Adds `e` to the stream's pending gates, once.
  void AddPending(worker_internal::StreamRec& stream, const Event& e);
  // Hands the pending gates to the local backend (before local work).
  void Flush(worker_internal::StreamRec& stream);
  // Events covering everything the stream has so far.
  std::vector<Event> Point(worker_internal::StreamRec& stream);
  // Calls `fn` once every event completed (with the first failure).
  void AfterAll(std::vector<Event> events, UcxLoop::Done fn);
  // Keeps `thing` alive until every stream of `s` has passed its present
  // work.
  void ReleaseAfterStreams(worker_internal::Session& s,
                           std::shared_ptr<void> thing);
  // A record of `value` on `stream` (kRecord, or a kGetTensor's): what it
  // covers, kept for kWaitStream.
  static absl::Status CheckRecordValue(const worker_internal::StreamRec& stream,
                                       uint64_t value);
  std::vector<Event> RecordValue(worker_internal::StreamRec& stream,
                                 uint64_t value);

  // One handler per command, called by Execute; each checks what the
  // command names against the session before touching anything.
  // Buffers (buffer_commands.cc).
  absl::Status AllocBuffer(const worker_internal::SessionPtr& s,
                           const Message& m);
  absl::Status FreeBuffer(const worker_internal::SessionPtr& s,
                          const Message& m);
  absl::Status Memset(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status CopyLocal(const worker_internal::SessionPtr& s,
                         const Message& m);
  absl::Status AllocSize(const worker_internal::SessionPtr& s,
                         const Message& m);
  // Streams (stream_commands.cc).
  absl::Status CreateStream(const worker_internal::SessionPtr& s,
                            const Message& m);
  absl::Status DestroyStream(const worker_internal::SessionPtr& s,
                             const Message& m);
  absl::Status Record(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status WaitStream(const worker_internal::SessionPtr& s,
                          const Message& m);
  absl::Status WaitGate(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status SignalGate(const worker_internal::SessionPtr& s,
                          const Message& m);
  absl::Status ResetStream(const worker_internal::SessionPtr& s,
                           const Message& m);
  // Graphs (graph_commands.cc).
  absl::Status DefineGraph(const worker_internal::SessionPtr& s,
                           const Message& m);
  absl::Status DropGraph(const worker_internal::SessionPtr& s,
                         const Message& m);
  absl::Status Launch(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status SupportsOp(const worker_internal::SessionPtr& s,
                          const Message& m);
  // Tensor I/O (tensor_io.cc).
  absl::Status SetTensor(const worker_internal::SessionPtr& s, const Message& m,
                         worker_internal::Incoming& in);
  absl::Status GetTensor(const worker_internal::SessionPtr& s,
                         const Message& m);
  // File loads (file_loads.cc).
  absl::Status LoadFile(const worker_internal::SessionPtr& s, const Message& m);
  // Reports (info_commands.cc).
  absl::Status Ping(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status Trace(const worker_internal::SessionPtr& s, const Message& m);
  absl::Status TraceSpans(const worker_internal::SessionPtr& s,
                          const Message& m);
  absl::Status EngineStats(const worker_internal::SessionPtr& s,
                           const Message& m);
  absl::Status Stats(const worker_internal::SessionPtr& s, const Message& m);
  void SetTracing(worker_internal::Session& s, bool on);

  // Peer transfers (peer_transfers.cc).
  absl::Status SendToPeer(const worker_internal::SessionPtr& s,
                          const Message& m);
  absl::Status RecvFromPeer(const worker_internal::SessionPtr& s,
                            const Message& m);
  absl::Status CancelTransfer(const worker_internal::SessionPtr& s,
                              const Message& m);
  // The bytes (or failure) of transfer `transfer` of session `s` arrived:
  // from the peer (kPeerData, possibly before its kRecvFromPeer), or a
  // failure from the client (kCancelTransfer) when the peer cannot send.
  void TransferArrived(worker_internal::Session& s, uint64_t transfer,
                       absl::Status status, worker_internal::Incoming& in);
  void PeerData(const worker_internal::SessionPtr& from, const Message& m,
                worker_internal::Incoming& in);
  void TryCompleteTransfer(uint64_t session, uint64_t transfer);
  static ucs_status_t OnReply(void* arg, const void* header,
                              size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param);
  void PeerReply(ucp_ep_h ep, const Message& m);
  void WithPeer(const std::string& address,
                absl::AnyInvocable<void(absl::Status, ucp_ep_h) &&> fn);
  void FailPeer(const std::shared_ptr<worker_internal::Peer>& p,
                absl::Status status);
  void ConnectPeer(std::shared_ptr<worker_internal::Peer> peer,
                   absl::StatusOr<sockaddr_storage> addr);
  bool PeerAllowed(const std::string& address) const;

  WorkerOptions options_;
  std::unique_ptr<UcxLoop> loop_;
  ucp_listener_h listener_ = nullptr;
  int port_ = 0;
  uint64_t next_session_ = 1;
  absl::flat_hash_map<ucp_ep_h, worker_internal::SessionPtr> by_ep_;
  absl::flat_hash_map<uint64_t, worker_internal::SessionPtr> by_id_;
  struct PendingEp {
    absl::Time since;
    std::string from;  // The client's address, for the log.
  };
  absl::flat_hash_map<ucp_ep_h, PendingEp> pending_eps_;  // Before hello.
  // Failed hellos by address: past a few, connections from there are
  // refused for a while (doubling, up to a minute).
  struct AuthFailures {
    int count = 0;
    absl::Time until = absl::InfinitePast();
  };
  absl::flat_hash_map<std::string, AuthFailures> auth_failures_;
  uint64_t worker_bytes_ = 0;
  int worker_streams_ = 0;
  int worker_threads_ = 0;
  std::map<std::string, std::shared_ptr<worker_internal::Peer>> peers_;
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<worker_internal::Peer>>
      peer_by_ep_;
  WorkerStats stats_;
  // Staging for device memory, reused: up to 16 weight pieces in flight.
  StagingPool staging_pool_{size_t{64} << 20,
                            options_.quotas.max_staging_bytes};
  absl::Time last_tick_ = absl::InfinitePast();
  // Sessions recording trace spans: the process's recorder is on while
  // any is.
  int tracing_sessions_ = 0;
  // File reads and name lookups (last: joined before the loop goes).
  std::unique_ptr<BlockingPool> pool_;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_WORKER_INTERNAL_WORKER_IMPL_H_
