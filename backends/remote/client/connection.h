// Connection: a client's session with one ferry worker (internal to the
// remote backend).
//
// Owns a UcxLoop (one progress thread) and the endpoint. Commands are
// handed to the loop in order and numbered there (the worker runs them in
// that order); Call() is a round trip for the few commands that need an
// answer now (allocations, stream creation, new graphs). Replies update
// stream timelines on the loop: a value is signalled once the worker has
// passed it and every download before it has landed. When the worker goes
// away (endpoint error, or no answer to pings within the deadline) every
// stream, download and call fails with Unavailable naming the worker.
#ifndef FERRY_BACKENDS_REMOTE_CLIENT_CONNECTION_H_
#define FERRY_BACKENDS_REMOTE_CLIENT_CONNECTION_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ferry/backends/event.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/backends/remote/transport/ucx_loop.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::remote {

class Connection;

// A copy a stream sends straight to another worker, until the worker says
// it ended (kTransferEnded): if it could not send, or the stream or the
// connection fails first, the bytes will not come, and the receiver is
// told (Connection::CancelTransfer) instead of waiting out its timeout.
struct PeerSend {
  uint64_t transfer = 0;
  std::weak_ptr<Connection> receiver;
};

// Client-side state of one worker stream; its fields are the loop's.
struct StreamState {
  std::shared_ptr<TimelineSemaphore> timeline;
  uint64_t worker_done = 0;  // Highest value the worker reported.
  // Downloads not yet landed, by the value that must wait for them.
  std::map<uint64_t, int> pending_gets;
  uint64_t ignore_failures_upto = 0;  // Reports from before a reset.
  std::deque<PeerSend> peer_sends;    // Oldest first.
};

// Thread-safe.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Done = UcxLoop::Done;

  // Connects and says hello; Unavailable naming the worker if it cannot.
  static absl::StatusOr<std::shared_ptr<Connection>> Open(
      const HostPort& worker, std::string token);
  // The open connection to `worker` with `token`, or a new one. Open
  // connections are closed at process exit (CloseForExit).
  static absl::StatusOr<std::shared_ptr<Connection>> Get(
      const HostPort& worker, const std::string& token);
  ~Connection();
  // Fails everything waiting with Unavailable and closes UCX now; the
  // connection refuses all work afterwards. Devices held to the end of a
  // program (a global registry) keep their connections open, and UCX's
  // libraries tear down their state after exit handlers while its threads
  // and the loop's still run: this runs for every open one at exit first.
  void CloseForExit();

  const HostPort& worker() const { return worker_; }
  uint64_t session() const { return session_; }
  // What another worker must present to deliver bytes into this session
  // (kSendToPeer passes it on).
  const Capability& capability() const { return capability_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  // The UCX transports the endpoint uses ("cma,tcp": cross-memory attach
  // for bulk bytes on one host, TCP for the rest), as of the hello.
  const std::string& transports() const { return transports_; }
  // OK, or why the connection is gone.
  absl::Status status() const;
  bool alive() const { return status().ok(); }
  uint64_t NewId() { return next_id_.fetch_add(1); }

  // Sends a command (seq is set on the loop). `data` must stay valid until
  // `done` (or the stream event after it).
  void Send(Message m, const void* data = nullptr, size_t size = 0,
            Done done = nullptr, bool force_rndv = false);
  // A round trip: the kResult for `m` (whose req is set here).
  absl::StatusOr<Message> Call(Message m,
                               absl::Duration timeout = absl::Seconds(60));
  // Spins on the connection's loop on the calling thread while `done()` is
  // false, for up to FERRY_REMOTE_DRIVE_SPIN_US (100 by default; 0: off), so a
  // thread about to wait for a reply receives it itself instead of being
  // woken by the loop's thread. True if done. See UcxLoop::Drive.
  bool Drive(absl::FunctionRef<bool()> done);
  // Tells the worker to record trace spans while this process's recorder
  // is on (sent when that changes, before the next command).
  void SyncTracing();
  // Queues a download: kGetTensor `m`, its bytes into `dst`; `stream`'s
  // value `tag` is not signalled before they land. With m.value (== tag)
  // the worker records that value right after the get, and the bytes'
  // arrival signals it (no kRecord, no kSignaled: one message each way).
  void Get(Message m, void* dst, uint64_t tag);

  // Stream `stream` sends transfer `transfer` to `receiver`'s worker:
  // should the send fail, or the stream or this connection fail before
  // the worker says it ended, `receiver` is told (CancelTransfer).
  void WatchPeerSend(uint64_t stream, uint64_t transfer,
                     std::weak_ptr<Connection> receiver);
  // Tells the worker that transfer `transfer` (a kRecvFromPeer) will not
  // come, failing its stream with `status`.
  void CancelTransfer(uint64_t transfer, absl::Status status);
  // Streams: timelines the replies drive.
  void AddStream(uint64_t id, std::shared_ptr<TimelineSemaphore> timeline);
  void RemoveStream(uint64_t id);
  // After a reset: a fresh timeline at `value`, earlier failures ignored.
  void ResetStream(uint64_t id, std::shared_ptr<TimelineSemaphore> timeline,
                   uint64_t value);
  // Calls `fn` on the loop when `event` completes (never on a device's
  // thread of another backend).
  void OnEvent(const Event& event, Done fn);
  // Registers host memory with UCX (pinned buffers); returns a handle to
  // unmap, or null if registration failed (memory still usable).
  void* MapMemory(void* address, size_t size);
  void UnmapMemory(void* handle);

  // Stops this client's loop without closing anything, as if it hung:
  // no more pings or commands (tests of a worker's client timeout).
  void AbandonForTesting();
  // Sends `header` as a command as it is (tests of hostile input).
  void SendRawForTesting(std::string header);

  static std::atomic<int64_t> bytes_sent;
  static std::atomic<int64_t> bytes_received;

 private:
  Connection(HostPort worker, std::string token);
  absl::Status Connect(bool cross_memory_attach);
  static ucs_status_t OnReply(void* arg, const void* header,
                              size_t header_length, void* data, size_t length,
                              const ucp_am_recv_param_t* param);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  ucs_status_t Reply(absl::string_view header, void* data, size_t length,
                     bool rndv);
  // Runs `fn` in the loop: here and now when this thread can hold it
  // (UcxLoop::RunOrPost) and driving is on, else posted.
  void RunInLoop(absl::AnyInvocable<void() &&> fn);
  void SendOnLoop(Message m, const void* data, size_t size, Done done,
                  bool force_rndv = false);
  // Loop only.
  void Fail(absl::Status status);
  void Advance(uint64_t stream);
  // Cancels `s`'s peer sends at their receivers with `status`.
  static void CancelPeerSends(StreamState& s, const absl::Status& status);
  void FinishGet(uint64_t req, absl::Status status);
  void Tick();

  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::StatusOr<Message> result = absl::UnknownError("no reply");
  };
  struct PendingGet {
    void* dst = nullptr;
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t tag = 0;
    bool records = false;  // The get also recorded `tag` on the worker.
  };

  const HostPort worker_;
  const std::string token_;
  std::atomic<bool> worker_tracing_{false};  // Last kTrace sent.
  std::unique_ptr<UcxLoop> loop_;
  ucp_ep_h ep_ = nullptr;
  uint64_t session_ = 0;
  Capability capability_ = {0, 0};
  std::atomic<bool> said_hello_{false};  // The loop pings only after.
  std::vector<DeviceInfo> devices_;
  std::string transports_;  // Set on the loop before the hello completes.
  uid_t worker_user_ = 0;   // The worker's effective user id (hello).
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  // Loop only:
  uint64_t next_seq_ = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Pending>> calls_;
  absl::flat_hash_map<uint64_t, PendingGet> gets_;
  absl::flat_hash_map<uint64_t, StreamState> streams_;
  std::shared_ptr<Pending> hello_;
  absl::Time last_heard_;
  absl::Time last_sent_;
  absl::Duration deadline_;
  bool ping_out_ = false;
};

}  // namespace ferry::remote

#endif  // FERRY_BACKENDS_REMOTE_CLIENT_CONNECTION_H_
