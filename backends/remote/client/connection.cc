#include "ferry/backends/remote/client/connection.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry::remote {

std::atomic<int64_t> Connection::bytes_sent{0};
std::atomic<int64_t> Connection::bytes_received{0};

namespace {

absl::Duration DeadlineFromEnv() {
  const char* env = std::getenv("FERRY_REMOTE_DEADLINE_MS");
  int64_t ms = 10000;
  if (env != nullptr && !absl::SimpleAtoi(env, &ms)) ms = 10000;
  return absl::Milliseconds(std::max<int64_t>(ms, 100));
}

absl::Duration MicrosecondsFromEnv(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  int64_t us = fallback;
  if (env != nullptr && !absl::SimpleAtoi(env, &us)) us = fallback;
  return absl::Microseconds(std::max<int64_t>(us, 0));
}

// How long a thread waiting for a reply (Synchronize, Call) spins on the
// loop itself before it sleeps (FERRY_REMOTE_DRIVE_SPIN_US, 0 turns it
// off: commands then go through the loop's thread). With the worker's loop
// polling too (ferry_worker --idle_spin_us), a 4 KiB download and its
// event took 20-25 us on TCP loopback on 2 cores against 37-44 us with
// neither (UCX's own sleep-mode tag round trip: 68 us), and the two-worker
// pipeline lost nothing measurable (0.86-0.92 of the local CPU either
// way): the spin is bounded and only a waiting thread does it.
absl::Duration DriveBudget() {
  static const absl::Duration budget =
      MicrosecondsFromEnv("FERRY_REMOTE_DRIVE_SPIN_US", 100);
  return budget;
}

// The client's loop thread does not poll when idle unless asked
// (FERRY_UCX_SPIN_US): completions it delivers have a waiting thread
// driving the loop, or nobody blocked on them.
absl::Duration LoopSpin() {
  static const absl::Duration spin =
      MicrosecondsFromEnv("FERRY_UCX_SPIN_US", 0);
  return spin;
}

std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::weak_ptr<Connection>>& OpenConnections() {
  static auto* map = new std::map<std::string, std::weak_ptr<Connection>>;
  return *map;
}

}  // namespace

Connection::Connection(HostPort worker, std::string token)
    : worker_(std::move(worker)), token_(std::move(token)) {}

Connection::~Connection() {
  if (loop_ != nullptr && ep_ != nullptr) {
    ucp_ep_h ep = ep_;
    loop_->Post([ep] { ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE); });
  }
  // Stop the progress thread while loop_ is still valid for what it runs.
  if (loop_ != nullptr) loop_->Join();
  loop_.reset();
}

void Connection::SyncTracing() {
  // Every launch asks: a plain load while nothing changes.
  const bool on = TraceRecorder::Global().enabled();
  if (worker_tracing_.load(std::memory_order_relaxed) == on ||
      worker_tracing_.exchange(on) == on) {
    return;
  }
  Message m;
  m.kind = static_cast<uint8_t>(Cmd::kTrace);
  m.value = on ? 1 : 0;
  Send(std::move(m));
}

void Connection::CloseForExit() {
  if (loop_ == nullptr) return;
  loop_->Post([this] {
    Fail(absl::UnavailableError(absl::StrCat(
        "remote worker ", worker_.ToString(), ": the process is exiting")));
  });
  loop_->Shutdown();
}

absl::StatusOr<std::shared_ptr<Connection>> Connection::Get(
    const HostPort& worker, const std::string& token) {
  static const bool closes_at_exit = [] {
    std::atexit([] {
      std::vector<std::shared_ptr<Connection>> open;
      {
        std::lock_guard<std::mutex> lock(RegistryMutex());
        for (auto& [key, weak] : OpenConnections()) {
          if (auto c = weak.lock()) open.push_back(std::move(c));
        }
      }
      for (auto& c : open) c->CloseForExit();
    });
    return true;
  }();
  (void)closes_at_exit;
  const std::string key = absl::StrCat(worker.ToString(), "#", token);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = OpenConnections().find(key);
  if (it != OpenConnections().end()) {
    std::shared_ptr<Connection> c = it->second.lock();
    if (c != nullptr && c->alive()) return c;
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, Open(worker, token));
  OpenConnections()[key] = c;
  return c;
}

absl::StatusOr<std::shared_ptr<Connection>> Connection::Open(
    const HostPort& worker, std::string token) {
  std::shared_ptr<Connection> c(new Connection(worker, token));
  absl::Status status = c->Connect(/*cross_memory_attach=*/true);
  if (status.ok() && c->worker_user_ != geteuid() &&
      UcxLoop::UsesCrossMemoryAttach(c->transports_)) {
    // A worker on this host running as another user: cross-memory attach
    // would fail every copy, so connect again without it.
    c.reset(new Connection(worker, std::move(token)));
    status = c->Connect(/*cross_memory_attach=*/false);
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "remote worker ", worker.ToString(), ": ", status.message()));
  }
  return c;
}

absl::Status Connection::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

absl::Status Connection::Connect(bool cross_memory_attach) {
  FERRY_ASSIGN_OR_RETURN(loop_, UcxLoop::Create(cross_memory_attach));
  deadline_ = DeadlineFromEnv();
  FERRY_RETURN_IF_ERROR(loop_->SetAmHandler(kAmReply, OnReply, this));
  FERRY_ASSIGN_OR_RETURN(sockaddr_storage addr,
                         ResolveAddress(worker_.host, worker_.port));
  ucp_ep_params_t params = {};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = sizeof(addr);
  // Peer-failure reports: a dead worker fails this connection at once. In
  // UCX 1.13 it also means that UCX's shared-memory queues, which cannot
  // report a dead peer, are not used: commands go over TCP even on one
  // host, and bulk bytes by cross-memory attach there (UcxLoop::Create).
  // Without the reports a client that went away abruptly reset other
  // clients' connections to the same worker.
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = this;
  FERRY_RETURN_IF_ERROR(
      UcxStatus(ucp_ep_create(loop_->worker(), &params, &ep_), "connecting"));
  hello_ = std::make_shared<Pending>();
  std::shared_ptr<Pending> hello = hello_;
  loop_->SetTick(absl::Milliseconds(250), [this] { Tick(); });
  loop_->SetIdleSpin(LoopSpin());
  last_heard_ = absl::Now();
  loop_->Start("remote " + worker_.ToString());
  Message m;
  m.kind = static_cast<uint8_t>(Cmd::kHello);
  m.value = kProtocolVersion;
  m.byte = static_cast<uint8_t>(Role::kClient);
  m.text = token_;
  loop_->Post([this, m = std::move(m)]() mutable {
    loop_->SendAm(ep_, kAmCommand, EncodeCommand(m), nullptr, 0);
  });
  std::unique_lock<std::mutex> lock(hello->mu);
  if (!hello->cv.wait_for(lock, std::chrono::seconds(10),
                          [&] { return hello->done; })) {
    return absl::DeadlineExceededError("no answer to hello in 10 s");
  }
  FERRY_ASSIGN_OR_RETURN(Message reply, hello->result);
  FERRY_RETURN_IF_ERROR(reply.status());
  session_ = reply.value;
  capability_ = reply.cap;
  worker_user_ = static_cast<uid_t>(reply.id);
  FERRY_ASSIGN_OR_RETURN(devices_, DecodeDeviceInfos(reply.blob));
  said_hello_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

void Connection::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<Connection*>(arg);
  self->loop_->Defer([self, status] {
    self->Fail(absl::UnavailableError(
        absl::StrCat("remote worker ", self->worker_.ToString(),
                     ": connection lost (", ucs_status_string(status), ")")));
  });
}

void Connection::Fail(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status_.ok()) return;
    status_ = status;
  }
  for (auto& [id, stream] : streams_) {
    stream.timeline->Fail(status);
    CancelPeerSends(stream, status);
  }
  for (auto& [req, call] : calls_) {
    std::lock_guard<std::mutex> lock(call->mu);
    call->result = status;
    call->done = true;
    call->cv.notify_all();
  }
  calls_.clear();
  gets_.clear();
  if (hello_ != nullptr) {
    std::lock_guard<std::mutex> lock(hello_->mu);
    if (!hello_->done) {
      hello_->result = status;
      hello_->done = true;
      hello_->cv.notify_all();
    }
  }
}

void Connection::Tick() {
  if (!alive()) return;
  const absl::Time now = absl::Now();
  if (now - last_heard_ > deadline_) {
    Fail(absl::UnavailableError(
        absl::StrCat("remote worker ", worker_.ToString(), ": no answer in ",
                     absl::FormatDuration(deadline_))));
    return;
  }
  if ((now - last_heard_ > absl::Milliseconds(500) ||
       now - last_sent_ > absl::Seconds(1)) &&
      said_hello_.load(std::memory_order_acquire)) {
    // Keep-alive both ways: any reply refreshes last_heard_, and the worker
    // hears from this client at least every second (a worker drops a
    // client silent for its client timeout).
    Message m;
    m.kind = static_cast<uint8_t>(Cmd::kPing);
    m.req = 0;
    SendOnLoop(std::move(m), nullptr, 0, nullptr);
  }
}

void Connection::SendOnLoop(Message m, const void* data, size_t size, Done done,
                            bool force_rndv) {
  absl::Status status = this->status();
  if (!status.ok()) {
    if (done != nullptr) std::move(done)(status);
    return;
  }
  // A long blob goes ahead in parts, each its own small message.
  while (m.blob.size() > kBlobChunk) {
    Message part;
    part.kind = static_cast<uint8_t>(Cmd::kBlobPart);
    part.seq = next_seq_++;
    part.blob = m.blob.substr(0, kBlobChunk);
    m.blob.erase(0, kBlobChunk);
    loop_->SendAm(ep_, kAmCommand, EncodeCommand(part), nullptr, 0);
  }
  m.seq = next_seq_++;
  last_sent_ = absl::Now();
  bytes_sent.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  loop_->SendAm(
      ep_, kAmCommand, EncodeCommand(m), data, size,
      [this, done = std::move(done)](absl::Status st) mutable {
        if (!st.ok())
          Fail(absl::UnavailableError(absl::StrCat(
              "remote worker ", worker_.ToString(), ": ", st.message())));
        if (done != nullptr) std::move(done)(st);
      },
      force_rndv);
}

void Connection::Send(Message m, const void* data, size_t size, Done done,
                      bool force_rndv) {
  RunInLoop([this, m = std::move(m), data, size, done = std::move(done),
             force_rndv]() mutable {
    SendOnLoop(std::move(m), data, size, std::move(done), force_rndv);
  });
}

void Connection::AbandonForTesting() {
  loop_->Post([this] { Fail(absl::CancelledError("abandoned for a test")); });
  loop_->Join();
}

void Connection::SendRawForTesting(std::string header) {
  loop_->Post([this, header = std::move(header)]() mutable {
    loop_->SendAm(ep_, kAmCommand, std::move(header), nullptr, 0);
  });
}

bool Connection::Drive(absl::FunctionRef<bool()> done) {
  return loop_->Drive(done, DriveBudget());
}

void Connection::RunInLoop(absl::AnyInvocable<void() &&> fn) {
  if (DriveBudget() > absl::ZeroDuration()) {
    loop_->RunOrPost(std::move(fn));
  } else {
    loop_->Post(std::move(fn));
  }
}

absl::StatusOr<Message> Connection::Call(Message m, absl::Duration timeout) {
  FERRY_RETURN_IF_ERROR(status());
  auto pending = std::make_shared<Pending>();
  m.req = NewId();
  const uint64_t req = m.req;
  RunInLoop([this, m = std::move(m), pending]() mutable {
    absl::Status status = this->status();
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(pending->mu);
      pending->result = status;
      pending->done = true;
      pending->cv.notify_all();
      return;
    }
    calls_[m.req] = pending;
    SendOnLoop(std::move(m), nullptr, 0, nullptr);
  });
  // Wait for the reply driving the loop (no thread hand-off) for a while,
  // then asleep.
  Drive([&] {
    std::lock_guard<std::mutex> lock(pending->mu);
    return pending->done;
  });
  std::unique_lock<std::mutex> lock(pending->mu);
  if (!pending->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                            [&] { return pending->done; })) {
    loop_->Post([this, req] { calls_.erase(req); });
    return absl::DeadlineExceededError(
        absl::StrCat("remote worker ", worker_.ToString(), ": no answer in ",
                     absl::FormatDuration(timeout)));
  }
  FERRY_ASSIGN_OR_RETURN(Message reply, pending->result);
  FERRY_RETURN_IF_ERROR(reply.status());
  return reply;
}

void Connection::Get(Message m, void* dst, uint64_t tag) {
  m.req = NewId();
  RunInLoop([this, m = std::move(m), dst, tag]() mutable {
    auto stream = streams_.find(m.stream);
    if (stream == streams_.end()) return;
    absl::Status status = this->status();
    if (!status.ok()) {
      stream->second.timeline->Fail(status);
      return;
    }
    ++stream->second.pending_gets[tag];
    gets_[m.req] = PendingGet{dst, m.size, m.stream, tag, m.value != 0};
    SendOnLoop(std::move(m), nullptr, 0, nullptr);
  });
}

void Connection::FinishGet(uint64_t req, absl::Status status) {
  auto it = gets_.find(req);
  if (it == gets_.end()) return;
  PendingGet get = it->second;
  gets_.erase(it);
  auto stream = streams_.find(get.stream);
  if (stream == streams_.end()) return;
  StreamState& s = stream->second;
  auto tag = s.pending_gets.find(get.tag);
  if (tag != s.pending_gets.end() && --tag->second == 0) {
    s.pending_gets.erase(tag);
  }
  if (!status.ok()) {
    s.timeline->Fail(status);
    return;
  }
  // The worker answers a get once its stream's earlier work is done; one
  // that recorded its value is that value's kSignaled.
  if (get.records) s.worker_done = std::max(s.worker_done, get.tag);
  Advance(get.stream);
}

void Connection::Advance(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  StreamState& s = it->second;
  uint64_t target = s.worker_done;
  if (!s.pending_gets.empty()) {
    target = std::min(target, s.pending_gets.begin()->first - 1);
  }
  if (target > s.timeline->Value()) (void)s.timeline->Signal(target);
}

void Connection::WatchPeerSend(uint64_t stream, uint64_t transfer,
                               std::weak_ptr<Connection> receiver) {
  RunInLoop([this, stream, transfer, receiver = std::move(receiver)]() mutable {
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    StreamState& s = it->second;
    s.peer_sends.push_back(PeerSend{transfer, std::move(receiver)});
    // Failed already: the failure's report came before this.
    absl::Status failed = s.timeline->status();
    if (!failed.ok()) {
      CancelPeerSends(s, failed);
      return;
    }
    // Bounded should ends go missing (each send has one): the oldest are
    // the likeliest done.
    constexpr size_t kMaxPeerSends = 4096;
    if (s.peer_sends.size() > kMaxPeerSends) s.peer_sends.pop_front();
  });
}

void Connection::CancelPeerSends(StreamState& s, const absl::Status& status) {
  for (PeerSend& send : s.peer_sends) {
    if (auto receiver = send.receiver.lock()) {
      receiver->CancelTransfer(send.transfer, status);
    }
  }
  s.peer_sends.clear();
}

void Connection::CancelTransfer(uint64_t transfer, absl::Status status) {
  Message m;
  m.kind = static_cast<uint8_t>(Cmd::kCancelTransfer);
  m.id = transfer;
  m.set_status(status);
  Send(std::move(m));
}

void Connection::AddStream(uint64_t id,
                           std::shared_ptr<TimelineSemaphore> timeline) {
  loop_->Post([this, id, timeline = std::move(timeline)]() mutable {
    StreamState& s = streams_[id];
    s.timeline = std::move(timeline);
    absl::Status status = this->status();
    if (!status.ok()) s.timeline->Fail(status);
  });
}

void Connection::RemoveStream(uint64_t id) {
  loop_->Post([this, id] { streams_.erase(id); });
}

void Connection::ResetStream(uint64_t id,
                             std::shared_ptr<TimelineSemaphore> timeline,
                             uint64_t value) {
  loop_->Post([this, id, timeline = std::move(timeline), value]() mutable {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    StreamState& s = it->second;
    s.timeline = std::move(timeline);
    s.worker_done = std::max(s.worker_done, value);
    s.pending_gets.clear();
    s.ignore_failures_upto = value;
    absl::Status status = this->status();
    if (!status.ok()) s.timeline->Fail(status);
  });
}

void Connection::OnEvent(const Event& event, Done fn) {
  Event copy = event;
  loop_->Post([this, copy, fn = std::move(fn)]() mutable {
    loop_->OnEvent(copy, std::move(fn));
  });
}

void* Connection::MapMemory(void* address, size_t size) {
  ucp_mem_map_params_t params = {};
  params.field_mask =
      UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = address;
  params.length = size;
  ucp_mem_h mem = nullptr;
  if (ucp_mem_map(loop_->context(), &params, &mem) != UCS_OK) return nullptr;
  return mem;
}

void Connection::UnmapMemory(void* handle) {
  if (handle != nullptr) {
    ucp_mem_unmap(loop_->context(), static_cast<ucp_mem_h>(handle));
  }
}

ucs_status_t Connection::OnReply(void* arg, const void* header,
                                 size_t header_length, void* data,
                                 size_t length,
                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Connection*>(arg);
  return self->Reply(
      absl::string_view(static_cast<const char*>(header), header_length), data,
      length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
}

ucs_status_t Connection::Reply(absl::string_view header, void* data,
                               size_t length, bool rndv) {
  last_heard_ = absl::Now();
  absl::StatusOr<Message> m = DecodeReply(header);
  if (!m.ok()) {
    Fail(absl::InternalError(
        absl::StrCat("remote worker ", worker_.ToString(),
                     ": bad reply: ", m.status().message())));
    return UCS_OK;
  }
  switch (m->reply()) {
    case ReplyKind::kHello: {
      std::shared_ptr<Pending> hello = hello_;
      if (hello == nullptr) break;
      transports_ = UcxLoop::EndpointTransports(ep_);
      std::lock_guard<std::mutex> lock(hello->mu);
      hello->result = *std::move(m);
      hello->done = true;
      hello->cv.notify_all();
      break;
    }
    case ReplyKind::kResult: {
      if (m->req == 0) {
        // The worker refused a command that had no one to answer: a bug
        // here, or a stream that no longer exists.
        if (m->code != 0) {
          Fail(absl::InternalError(
              absl::StrCat("remote worker ", worker_.ToString(),
                           " refused a command: ", m->text)));
        }
        break;
      }
      auto it = calls_.find(m->req);
      if (it == calls_.end()) break;
      std::shared_ptr<Pending> call = it->second;
      calls_.erase(it);
      auto finish = [call](absl::StatusOr<Message> result) {
        std::lock_guard<std::mutex> lock(call->mu);
        call->result = std::move(result);
        call->done = true;
        call->cv.notify_all();
      };
      // A result with data (kTraceSpans): the data is the reply's blob.
      if (length > kMaxBlob) {
        finish(absl::InternalError(
            absl::StrCat("a result of ", length, " bytes")));
        break;
      }
      m->blob.resize(length);
      if (rndv) {
        auto reply = std::make_shared<Message>(*std::move(m));
        loop_->Defer([this, data, length, reply, finish]() mutable {
          loop_->RecvAmData(data, reply->blob.data(), length,
                            [reply, finish](absl::Status st) mutable {
                              if (st.ok()) {
                                finish(std::move(*reply));
                              } else {
                                finish(st);
                              }
                            });
        });
        return UCS_INPROGRESS;
      }
      if (length > 0) std::memcpy(m->blob.data(), data, length);
      finish(*std::move(m));
      break;
    }
    case ReplyKind::kSignaled: {
      auto it = streams_.find(m->stream);
      if (it == streams_.end()) break;
      it->second.worker_done = std::max(it->second.worker_done, m->value);
      Advance(m->stream);
      break;
    }
    case ReplyKind::kTransferEnded: {
      // Sent: forget it. Not sent: tell the receiving worker.
      auto it = streams_.find(m->stream);
      if (it == streams_.end()) break;
      auto& sends = it->second.peer_sends;
      for (auto send = sends.begin(); send != sends.end(); ++send) {
        if (send->transfer != m->id) continue;
        if (auto receiver = send->receiver.lock();
            receiver != nullptr && m->code != 0) {
          receiver->CancelTransfer(send->transfer, m->status());
        }
        sends.erase(send);
        break;
      }
      break;
    }
    case ReplyKind::kStreamFailed: {
      auto it = streams_.find(m->stream);
      if (it == streams_.end()) break;
      if (m->value <= it->second.ignore_failures_upto) break;
      it->second.timeline->Fail(m->status());
      CancelPeerSends(it->second, m->status());
      break;
    }
    case ReplyKind::kGetData: {
      auto it = gets_.find(m->req);
      if (it == gets_.end()) break;
      const uint64_t req = m->req;
      if (!m->status().ok()) {
        FinishGet(req, m->status());
        break;
      }
      if (length != it->second.size) {
        FinishGet(req,
                  absl::InternalError(absl::StrCat(
                      "download of ", it->second.size, " bytes got ", length)));
        break;
      }
      bytes_received.fetch_add(static_cast<int64_t>(length),
                               std::memory_order_relaxed);
      if (rndv) {
        void* dst = it->second.dst;
        loop_->Defer([this, data, dst, length, req] {
          loop_->RecvAmData(data, dst, length, [this, req](absl::Status st) {
            FinishGet(req, st);
          });
        });
        return UCS_INPROGRESS;
      }
      if (length > 0) std::memcpy(it->second.dst, data, length);
      FinishGet(req, absl::OkStatus());
      break;
    }
  }
  return UCS_OK;
}

}  // namespace ferry::remote
