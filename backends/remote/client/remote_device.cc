#include "ferry/backends/remote/client/remote_device.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/remote/client/connection.h"
#include "ferry/backends/remote/protocol/protocol.h"
#include "ferry/backends/remote/protocol/wire_graph.h"
#include "ferry/backends/remote/transport/address.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/trace.h"

namespace ferry {

using remote::Cmd;
using remote::Connection;
using remote::DeviceInfo;
using remote::HostPort;
using remote::Message;

namespace {

class RemoteDevice;

Message Command(Cmd cmd) {
  Message m;
  m.kind = static_cast<uint8_t>(cmd);
  return m;
}

// Largest piece of a weight one set or load command carries. Small pieces
// let the worker receive the next while its device lays out the last, in
// staging its pool keeps (staging_pool.h): 64 MiB of f32 packed on a
// worker's CPU uploads at 1.6-1.9 GB/s in 4 MiB pieces over loopback TCP
// (1.1 GB/s in 32 MiB ones, before the pool).
constexpr size_t kWeightPiece = size_t{4} << 20;

// Opaque addresses for remote buffers: distinct, never dereferenced.
std::atomic<uint64_t> next_remote_address{uint64_t{1} << 44};

// The worker device's memory: its default type, or (`weights`) its weights
// type (DeviceInfo::weights_type), whose tensors the worker lays out itself
// (the CPU's panels): their sizes come from the worker, and every transfer
// names its tensor. Thread-safe.
class RemoteBufferType final : public BufferType {
 public:
  RemoteBufferType(RemoteDevice* device, std::string name, bool weights)
      : device_(device), name_(std::move(name)), weights_(weights) {}
  absl::string_view name() const override { return name_; }
  size_t alignment() const override;
  size_t max_size() const override;
  size_t AllocSize(const Tensor& tensor) const override;
  bool is_host() const override { return false; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  bool weights() const { return weights_; }

 private:
  RemoteDevice* device_;
  const std::string name_;
  const bool weights_;
  // Worker answers by dtype, shape and strides (a model has few shapes).
  mutable absl::Mutex sizes_mu_;
  mutable absl::flat_hash_map<std::string, size_t> sizes_
      ABSL_GUARDED_BY(sizes_mu_);
};

// A buffer on the worker. Thread-compatible.
class RemoteBuffer final : public Buffer {
 public:
  RemoteBuffer(RemoteBufferType* type, RemoteDevice* device,
               std::shared_ptr<Connection> connection, uint64_t id, size_t size,
               void* base)
      : Buffer(type, base, size),
        device_(device),
        connection_(std::move(connection)),
        id_(id) {}
  ~RemoteBuffer() override;

  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override;
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override;
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override;
  absl::Status Clear(uint8_t value) override;

  uint64_t id() const { return id_; }
  bool weights() const {
    return static_cast<const RemoteBufferType*>(type())->weights();
  }
  const std::shared_ptr<Connection>& connection() const { return connection_; }
  RemoteDevice* remote_device() const { return device_; }
  // Offset of `tensor.data + offset` in the buffer.
  uint64_t OffsetOf(const Tensor& tensor, size_t offset = 0) const {
    return static_cast<uint64_t>(static_cast<const char*>(tensor.data) -
                                 static_cast<const char*>(base())) +
           offset;
  }
  // What a transfer of `tensor`'s bytes carries: for a weights buffer, the
  // tensor ref the worker lays its bytes out by; else nothing (raw bytes).
  std::string RefOf(const Tensor& tensor) const {
    if (!weights()) return "";
    const Tensor* source = tensor.view_src;
    return remote::EncodeTensorRef(tensor, OffsetOf(tensor), source,
                                   source != nullptr ? OffsetOf(*source) : 0);
  }

 private:
  RemoteDevice* device_;
  std::shared_ptr<Connection> connection_;
  uint64_t id_;
};

// Host memory registered with UCX: transfers from and to it go without
// copies on this side. Thread-safe.
class PinnedBufferType final : public BufferType {
 public:
  explicit PinnedBufferType(RemoteDevice* device)
      : device_(device), plain_("remote_pinned", 64, nullptr) {}
  absl::string_view name() const override { return "remote_pinned"; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  RemoteDevice* device_;
  HostBufferType plain_;
};

class PinnedBuffer final : public Buffer {
 public:
  PinnedBuffer(BufferType* type, std::unique_ptr<Buffer> memory,
               std::shared_ptr<Connection> connection, void* handle)
      : Buffer(type, memory->base(), memory->size()),
        memory_(std::move(memory)),
        connection_(std::move(connection)),
        handle_(handle) {}
  ~PinnedBuffer() override {
    if (connection_ != nullptr) connection_->UnmapMemory(handle_);
  }
  absl::Status SetTensor(Tensor& tensor, const void* data, size_t offset,
                         size_t size) override {
    std::memcpy(static_cast<char*>(tensor.data) + offset, data, size);
    return absl::OkStatus();
  }
  absl::Status GetTensor(const Tensor& tensor, void* data, size_t offset,
                         size_t size) override {
    std::memcpy(data, static_cast<const char*>(tensor.data) + offset, size);
    return absl::OkStatus();
  }
  absl::Status MemsetTensor(Tensor& tensor, uint8_t value, size_t offset,
                            size_t size) override {
    std::memset(static_cast<char*>(tensor.data) + offset, value, size);
    return absl::OkStatus();
  }
  absl::Status Clear(uint8_t value) override {
    std::memset(base(), value, size());
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Buffer> memory_;
  std::shared_ptr<Connection> connection_;
  void* handle_;
};

// What a remote event carries: the worker stream and value, so a backend
// of the same worker waits for it there.
struct RemoteEvent final : NativeEvent {
  RemoteEvent(const Connection* c, uint64_t s, uint64_t v)
      : connection(c), stream(s), value(v) {}
  const Connection* connection;
  uint64_t stream;
  uint64_t value;
};

class RemoteBackend;

class RemoteDevice final : public Device {
 public:
  RemoteDevice(std::string name, HostPort worker, std::string device,
               std::string token, std::shared_ptr<Connection> connection,
               uint32_t index, DeviceInfo info)
      : name_(std::move(name)),
        worker_(std::move(worker)),
        device_(std::move(device)),
        token_(std::move(token)),
        connection_(std::move(connection)),
        index_(index),
        info_(std::move(info)),
        buffer_type_(this, name_, /*weights=*/false),
        pinned_type_(this) {
    if (!info_.weights_type.empty()) {
      weights_type_ = std::make_unique<RemoteBufferType>(
          this, absl::StrCat(name_, "/", info_.weights_type),
          /*weights=*/true);
    }
  }

  absl::string_view name() const override { return name_; }
  DeviceProps props() const override {
    DeviceProps props;
    props.name = name_;
    props.description =
        absl::StrCat(info_.name, " on worker ", worker_.ToString(), " (",
                     info_.description, ")");
    // Never host memory here, whatever the worker's device is.
    props.type = DeviceType::kAccel;
    props.memory_free = info_.memory_free;
    props.memory_total = info_.memory_total;
    props.caps.async = true;
    props.caps.host_buffer = true;
    props.caps.events = true;
    return props;
  }
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  // The worker device's weights type (the CPU's panels) where it has one.
  BufferType* weights_buffer_type() override {
    return weights_type_ != nullptr ? weights_type_.get() : &buffer_type_;
  }
  BufferType* host_buffer_type() override { return &pinned_type_; }
  absl::Status CheckOp(const Tensor& node) const override;
  // The worker device's engines, named under this device (a round trip;
  // empty while the worker cannot answer).
  std::vector<DeviceCounters> engine_stats() const override;
  // The worker device's spans (recorded while this process's recorder was
  // on), on its tracks under this device's name, moved to this host's clock
  // by the offset a few pings measure.
  absl::Status CollectTrace(TraceRecorder& into) override;
  // The worker's name for one of this device's engines or trace tracks
  // ("cpu/compute") under this device's ("remote:H:P/cpu/compute"); nullopt
  // for another device's.
  std::optional<std::string> LocalName(absl::string_view worker_name) const {
    const std::string prefix = absl::StrCat(info_.name, "/");
    if (!absl::StartsWith(worker_name, prefix)) return std::nullopt;
    return absl::StrCat(name_, "/", worker_name.substr(prefix.size()));
  }
  bool SupportsBufferType(const BufferType* type) const override {
    return type == &buffer_type_ ||
           (weights_type_ != nullptr && type == weights_type_.get());
  }
  EventWaitMode WaitMode(const Event& event) const override {
    if (event.IsComplete()) return EventWaitMode::kDevice;
    auto* native = dynamic_cast<const RemoteEvent*>(event.native().get());
    std::lock_guard<std::mutex> lock(mu_);
    return native != nullptr && native->connection == connection_.get()
               ? EventWaitMode::kDevice
               : EventWaitMode::kHost;
  }

  // The live connection (a new one if the last was lost).
  absl::StatusOr<std::shared_ptr<Connection>> connection() {
    std::lock_guard<std::mutex> lock(mu_);
    if (connection_->alive()) return connection_;
    FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> fresh,
                           Connection::Get(worker_, token_));
    uint32_t index = 0;
    for (; index < fresh->devices().size(); ++index) {
      if (fresh->devices()[index].name == device_) break;
    }
    if (index == fresh->devices().size()) {
      return absl::NotFoundError(absl::StrCat("worker ", worker_.ToString(),
                                              " no longer serves ", device_));
    }
    connection_ = std::move(fresh);
    index_ = index;
    graphs_.clear();
    return connection_;
  }
  std::shared_ptr<Connection> current_connection() const {
    std::lock_guard<std::mutex> lock(mu_);
    return connection_;
  }
  uint32_t index() const {
    std::lock_guard<std::mutex> lock(mu_);
    return index_;
  }
  const DeviceInfo& info() const { return info_; }

  // Where `t` is on the worker over `connection`: a buffer of this device
  // made on that connection, or an error saying why not.
  absl::StatusOr<remote::WirePlace> Locate(const Tensor& t,
                                           const Connection* connection) const;
  // The id of the graph `blob` on the worker, defined there if new.
  absl::StatusOr<uint64_t> GraphId(const std::shared_ptr<Connection>& c,
                                   std::string blob,
                                   std::vector<uint64_t> buffers);
  // Drops the graphs that read `buffer` (it is being freed).
  void ForgetBuffer(const Connection* c, uint64_t buffer);
  // Runs `fn` with the device's own stream for synchronous transfers.
  absl::Status WithSyncBackend(const std::shared_ptr<Connection>& c,
                               absl::FunctionRef<absl::Status(Backend&)> fn);

 private:
  struct CachedGraph {
    uint64_t id;
    std::vector<uint64_t> buffers;
    uint64_t last_use;
  };
  static constexpr size_t kMaxCachedGraphs = 512;

  const std::string name_;
  const HostPort worker_;
  const std::string device_;
  const std::string token_;
  mutable std::mutex mu_;
  std::shared_ptr<Connection> connection_ ABSL_GUARDED_BY(mu_);
  uint32_t index_ ABSL_GUARDED_BY(mu_);
  const DeviceInfo info_;
  RemoteBufferType buffer_type_;
  std::unique_ptr<RemoteBufferType> weights_type_;  // Null: none.
  PinnedBufferType pinned_type_;
  std::map<std::string, CachedGraph> graphs_ ABSL_GUARDED_BY(mu_);
  uint64_t graph_clock_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::mutex supports_mu_;
  // Nodes the worker accepts, by their nameless encoding (names do not
  // change the answer).
  mutable std::set<std::string> supported_ ABSL_GUARDED_BY(supports_mu_);
  // The worker's reasons for its noes, by the named encoding (the reason
  // names the node's tensors).
  mutable std::map<std::string, absl::Status> refusals_
      ABSL_GUARDED_BY(supports_mu_);
  // The connection whose buffer ids both caches' keys hold.
  mutable std::weak_ptr<Connection> supports_connection_
      ABSL_GUARDED_BY(supports_mu_);
  std::mutex sync_mu_;
  std::unique_ptr<Backend> sync_backend_ ABSL_GUARDED_BY(sync_mu_);
  const Connection* sync_connection_ ABSL_GUARDED_BY(sync_mu_) = nullptr;
};

// A stream on the worker. Thread-compatible.
class RemoteBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteBackend>> Create(
      RemoteDevice& device, absl::string_view params);
  ~RemoteBackend() override;

  absl::string_view name() const override { return device_.name(); }
  Device& device() const override { return device_; }

  absl::Status EnqueueSetTensor(Tensor& tensor, const void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueGetTensor(const Tensor& tensor, void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueCopyTensor(Backend& src_backend, const Tensor& src,
                                 Tensor& dst) override;
  absl::Status EnqueueCompute(NodeSpan nodes) override;
  Event Record() override;
  absl::Status EnqueueWait(const Event& event) override;
  absl::Status Synchronize() override;

  absl::Status EnqueueLoadFile(Tensor& tensor, size_t offset, size_t size,
                               absl::string_view path, uint64_t file_offset);
  const std::shared_ptr<Connection>& connection() const { return connection_; }
  uint64_t stream() const { return stream_; }

 private:
  RemoteBackend(RemoteDevice& device, std::shared_ptr<Connection> connection,
                uint64_t stream)
      : device_(device),
        connection_(std::move(connection)),
        stream_(stream),
        timeline_(std::make_shared<TimelineSemaphore>(0)) {}

  // The buffer of `tensor` if it is this stream's memory, with [offset,
  // offset + size) inside the tensor.
  absl::StatusOr<RemoteBuffer*> Resolve(const Tensor& tensor, size_t offset,
                                        size_t size, absl::string_view what);
  void Enqueued() { dirty_ = true; }
  // Sends the download held back by EnqueueGetTensor, if any; with
  // `record` (its value) the worker records that value after it and its
  // reply stands for the record's. Called before anything else is sent on
  // this stream, so the stream's order is kept.
  void SendHeldGet(uint64_t record = 0);

  // A download that is sent with the next command of this stream: when
  // that is Record(), one message each way does both (a get followed by a
  // synchronize, the common small round trip).
  struct HeldGet {
    Message m;
    void* data = nullptr;
    uint64_t tag = 0;
  };
  std::optional<HeldGet> held_get_;

  RemoteDevice& device_;
  std::shared_ptr<Connection> connection_;
  const uint64_t stream_;
  std::shared_ptr<TimelineSemaphore> timeline_;
  uint64_t last_value_ = 0;
  bool dirty_ = false;
  Event last_;
  std::vector<Event> host_waits_;  // Foreign events gates wait for.
};

size_t RemoteBufferType::alignment() const {
  return static_cast<size_t>(weights_ ? device_->info().weights_alignment
                                      : device_->info().alignment);
}

size_t RemoteBufferType::AllocSize(const Tensor& tensor) const {
  const size_t logical = BufferType::AllocSize(tensor);
  // Views are never allocated; only an owner's layout can differ.
  if (!weights_ || tensor.view_src != nullptr) return logical;
  Tensor shape;  // What the size depends on: no name, no place.
  shape.dtype = tensor.dtype;
  shape.ne = tensor.ne;
  shape.nb = tensor.nb;
  std::string key = remote::EncodeTensorRef(shape, 0, nullptr, 0);
  {
    absl::MutexLock lock(&sizes_mu_);
    auto it = sizes_.find(key);
    if (it != sizes_.end()) return it->second;
  }
  absl::StatusOr<std::shared_ptr<Connection>> c = device_->connection();
  if (!c.ok()) return logical;  // Allocating on a lost worker fails anyway.
  Message m = Command(Cmd::kAllocSize);
  m.device = device_->index();
  m.blob = key;
  absl::StatusOr<Message> reply = (*c)->Call(std::move(m));
  // A tensor the worker cannot size is refused when it is placed there.
  if (!reply.ok()) return logical;
  const size_t size = std::max<size_t>(logical, reply->value);
  absl::MutexLock lock(&sizes_mu_);
  sizes_[key] = size;
  return size;
}
size_t RemoteBufferType::max_size() const {
  return device_->info().max_size == 0
             ? SIZE_MAX
             : static_cast<size_t>(device_->info().max_size);
}
Device* RemoteBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> RemoteBufferType::Allocate(
    size_t size) {
  if (size > max_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        device_->name(), ": ", size, " bytes is over ", max_size()));
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, device_->connection());
  Message m = Command(Cmd::kAllocBuffer);
  m.device = device_->index();
  m.size = size;
  m.byte = weights_ ? 1 : 0;
  FERRY_ASSIGN_OR_RETURN(Message reply, c->Call(std::move(m)));
  const uint64_t span =
      (static_cast<uint64_t>(size) + 0xFFFF) & ~uint64_t{0xFFFF};
  void* base = reinterpret_cast<void*>(
      next_remote_address.fetch_add(span + 0x10000, std::memory_order_relaxed));
  return std::unique_ptr<Buffer>(
      new RemoteBuffer(this, device_, std::move(c), reply.value, size, base));
}

RemoteBuffer::~RemoteBuffer() {
  device_->ForgetBuffer(connection_.get(), id_);
  Message m = Command(Cmd::kFreeBuffer);
  m.buffer = id_;
  connection_->Send(std::move(m));
}

absl::Status RemoteBuffer::SetTensor(Tensor& tensor, const void* data,
                                     size_t offset, size_t size) {
  return device_->WithSyncBackend(connection_, [&](Backend& b) {
    FERRY_RETURN_IF_ERROR(b.EnqueueSetTensor(tensor, data, offset, size));
    return b.Synchronize();
  });
}

absl::Status RemoteBuffer::GetTensor(const Tensor& tensor, void* data,
                                     size_t offset, size_t size) {
  return device_->WithSyncBackend(connection_, [&](Backend& b) {
    FERRY_RETURN_IF_ERROR(b.EnqueueGetTensor(tensor, data, offset, size));
    return b.Synchronize();
  });
}

absl::Status RemoteBuffer::MemsetTensor(Tensor& tensor, uint8_t value,
                                        size_t offset, size_t size) {
  Message m = Command(Cmd::kMemset);
  m.buffer = id_;
  m.offset = OffsetOf(tensor, offset);
  m.size = size;
  m.byte = value;
  m.blob = RefOf(tensor);
  return connection_->Call(std::move(m)).status();
}

absl::Status RemoteBuffer::Clear(uint8_t value) {
  Message m = Command(Cmd::kMemset);
  m.buffer = id_;
  m.offset = 0;
  m.size = this->size();
  m.byte = value;
  return connection_->Call(std::move(m)).status();
}

Device* PinnedBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> PinnedBufferType::Allocate(
    size_t size) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> memory, plain_.Allocate(size));
  std::shared_ptr<Connection> c = device_->current_connection();
  void* handle = c->MapMemory(memory->base(), memory->size());
  return std::unique_ptr<Buffer>(
      new PinnedBuffer(this, std::move(memory), std::move(c), handle));
}

absl::StatusOr<std::unique_ptr<Backend>> RemoteDevice::CreateBackend(
    absl::string_view params) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<RemoteBackend> backend,
                         RemoteBackend::Create(*this, params));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<remote::WirePlace> RemoteDevice::Locate(
    const Tensor& t, const Connection* connection) const {
  auto* buffer = dynamic_cast<RemoteBuffer*>(t.buffer);
  if (buffer == nullptr || buffer->remote_device() != this) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in memory of ",
        t.buffer == nullptr ? "no buffer"
                            : std::string(t.buffer->type()->name()),
        ", not of ", name()));
  }
  if (buffer->connection().get() != connection) {
    return absl::UnavailableError("its buffer was on a lost connection");
  }
  return remote::WirePlace{buffer->id(), buffer->OffsetOf(t)};
}

absl::Status RemoteDevice::CheckOp(const Tensor& node) const {
  std::shared_ptr<Connection> c = current_connection();
  // The places of sources already in this worker's memory go along: the
  // worker's answer can depend on them (a view into the CPU's packed
  // weights), as a local device's does.
  auto locate_fn = [&](const Tensor& t) { return Locate(t, c.get()); };
  remote::WireLocate locate = locate_fn;
  Tensor* const ptr = const_cast<Tensor*>(&node);
  auto encode = [&](bool with_names) {
    return remote::EncodeNodes(absl::Span<Tensor* const>(&ptr, 1), &locate,
                               with_names, remote::WirePlacing::kWhereKnown);
  };
  absl::StatusOr<std::string> key = encode(/*with_names=*/false);
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrCat(name_, ": ", key.status().message()));
  }
  // A yes is kept by everything but names; a no by the names too. Places
  // are buffer ids of one connection: a new one starts afresh.
  {
    std::lock_guard<std::mutex> lock(supports_mu_);
    if (supports_connection_.lock() != c) {
      supported_.clear();
      refusals_.clear();
      supports_connection_ = c;
    }
    if (supported_.count(*key) > 0) return absl::OkStatus();
  }
  FERRY_ASSIGN_OR_RETURN(std::string named, encode(/*with_names=*/true));
  {
    std::lock_guard<std::mutex> lock(supports_mu_);
    auto refused = refusals_.find(named);
    if (refused != refusals_.end()) return refused->second;
  }
  Message m = Command(Cmd::kSupportsOp);
  m.device = index();
  m.blob = named;
  absl::StatusOr<Message> reply = c->Call(std::move(m));
  // A lost connection or a late reply is no answer (not kept: a new one
  // may say yes).
  if (!c->alive()) {
    return absl::UnavailableError(
        absl::StrCat(name_, ": no answer: ", c->status().message()));
  }
  if (reply.status().code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::Status(reply.status().code(),
                        absl::StrCat(name_, ": ", reply.status().message()));
  }
  absl::Status answer =
      !reply.ok()
          ? absl::Status(reply.status().code(),
                         absl::StrCat(name_, ": ", reply.status().message()))
      : reply->value == 1
          ? absl::OkStatus()
          : absl::UnimplementedError(absl::StrCat(name_, ": refused"));
  std::lock_guard<std::mutex> lock(supports_mu_);
  if (supports_connection_.lock() != c) return answer;
  if (answer.ok()) {
    if (supported_.size() > 4096) supported_.clear();
    supported_.insert(*std::move(key));
  } else {
    if (refusals_.size() > 4096) refusals_.clear();
    refusals_[std::move(named)] = answer;
  }
  return answer;
}

absl::StatusOr<uint64_t> RemoteDevice::GraphId(
    const std::shared_ptr<Connection>& c, std::string blob,
    std::vector<uint64_t> buffers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (c != connection_) {
      return absl::UnavailableError(
          absl::StrCat(name_, ": the connection this stream used was lost"));
    }
    auto it = graphs_.find(blob);
    if (it != graphs_.end()) {
      it->second.last_use = ++graph_clock_;
      return it->second.id;
    }
  }
  Message m = Command(Cmd::kDefineGraph);
  m.device = index();
  m.blob = blob;
  FERRY_ASSIGN_OR_RETURN(Message reply, c->Call(std::move(m)));
  std::lock_guard<std::mutex> lock(mu_);
  if (graphs_.size() >= kMaxCachedGraphs) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    Message drop = Command(Cmd::kDropGraph);
    drop.id = oldest->second.id;
    c->Send(std::move(drop));
    graphs_.erase(oldest);
  }
  graphs_[std::move(blob)] =
      CachedGraph{reply.value, std::move(buffers), ++graph_clock_};
  return reply.value;
}

void RemoteDevice::ForgetBuffer(const Connection* c, uint64_t buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c != connection_.get()) return;
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    const auto& ids = it->second.buffers;
    if (std::find(ids.begin(), ids.end(), buffer) != ids.end()) {
      Message drop = Command(Cmd::kDropGraph);
      drop.id = it->second.id;
      connection_->Send(std::move(drop));
      it = graphs_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status RemoteDevice::WithSyncBackend(
    const std::shared_ptr<Connection>& c,
    absl::FunctionRef<absl::Status(Backend&)> fn) {
  std::lock_guard<std::mutex> lock(sync_mu_);
  if (sync_backend_ == nullptr || sync_connection_ != c.get()) {
    FERRY_RETURN_IF_ERROR(c->status());
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<RemoteBackend> backend,
                           RemoteBackend::Create(*this, ""));
    if (backend->connection() != c) {
      return absl::UnavailableError(
          absl::StrCat(name_, ": the buffer's connection was lost"));
    }
    sync_backend_ = std::move(backend);
    sync_connection_ = c.get();
  }
  return fn(*sync_backend_);
}

absl::StatusOr<std::unique_ptr<RemoteBackend>> RemoteBackend::Create(
    RemoteDevice& device, absl::string_view params) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, device.connection());
  Message m = Command(Cmd::kCreateStream);
  m.device = device.index();
  m.text = std::string(params);
  FERRY_ASSIGN_OR_RETURN(Message reply, c->Call(std::move(m)));
  std::unique_ptr<RemoteBackend> backend(
      new RemoteBackend(device, c, reply.value));
  c->AddStream(backend->stream_, backend->timeline_);
  return backend;
}

RemoteBackend::~RemoteBackend() {
  // A download still held has no event after it that anyone could wait
  // for: drop it rather than write into host memory the caller may free.
  held_get_.reset();
  connection_->RemoveStream(stream_);
  Message m = Command(Cmd::kDestroyStream);
  m.stream = stream_;
  connection_->Send(std::move(m));
}

absl::StatusOr<RemoteBuffer*> RemoteBackend::Resolve(const Tensor& tensor,
                                                     size_t offset, size_t size,
                                                     absl::string_view what) {
  if (tensor.buffer == nullptr || tensor.data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " of '", tensor.name, "': not placed"));
  }
  auto* buffer = dynamic_cast<RemoteBuffer*>(tensor.buffer);
  if (buffer == nullptr || buffer->remote_device() != &device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of '", tensor.name, "': its memory (",
        tensor.buffer->type()->name(), ") is not ", device_.name(), "'s"));
  }
  if (buffer->connection() != connection_) {
    return absl::UnavailableError(absl::StrCat(
        what, " of '", tensor.name, "': its buffer was on a lost connection"));
  }
  const uint64_t bytes = static_cast<uint64_t>(tensor.NumBytes());
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(what, " of '", tensor.name,
                                              "': bytes [", offset, ", +", size,
                                              ") are outside its ", bytes));
  }
  return buffer;
}

absl::Status RemoteBackend::EnqueueSetTensor(Tensor& tensor, const void* data,
                                             size_t offset, size_t size) {
  FERRY_ASSIGN_OR_RETURN(RemoteBuffer * buffer,
                         Resolve(tensor, offset, size, "upload"));
  FERRY_RETURN_IF_ERROR(connection_->status());
  if (size == 0) return absl::OkStatus();
  SendHeldGet();
  Message m = Command(Cmd::kSetTensor);
  m.stream = stream_;
  m.buffer = buffer->id();
  m.blob = buffer->RefOf(tensor);
  // Host bytes produced by work this stream waits for on the host side
  // must be read in stream order: the worker pulls them when it gets there.
  host_waits_.erase(
      std::remove_if(host_waits_.begin(), host_waits_.end(),
                     [](const Event& e) { return e.IsComplete(); }),
      host_waits_.end());
  const bool ordered = !host_waits_.empty();
  m.byte = ordered ? 1 : 0;
  // The worker stages a weight's bytes before laying them out: in pieces
  // (kWeightPiece).
  const size_t piece = buffer->weights() ? kWeightPiece : size;
  for (size_t done = 0; done < size; done += piece) {
    Message part = m;
    part.offset = buffer->OffsetOf(tensor, offset + done);
    part.size = std::min(piece, size - done);
    connection_->Send(std::move(part), static_cast<const char*>(data) + done,
                      part.size, nullptr, ordered);
  }
  Enqueued();
  return absl::OkStatus();
}

absl::Status RemoteBackend::EnqueueGetTensor(const Tensor& tensor, void* data,
                                             size_t offset, size_t size) {
  FERRY_ASSIGN_OR_RETURN(RemoteBuffer * buffer,
                         Resolve(tensor, offset, size, "download"));
  FERRY_RETURN_IF_ERROR(connection_->status());
  if (size == 0) return absl::OkStatus();
  SendHeldGet();
  Message m = Command(Cmd::kGetTensor);
  m.stream = stream_;
  m.buffer = buffer->id();
  m.offset = buffer->OffsetOf(tensor, offset);
  m.size = size;
  m.blob = buffer->RefOf(tensor);
  // The next recorded value covers this download.
  held_get_ = HeldGet{std::move(m), data, last_value_ + 1};
  Enqueued();
  return absl::OkStatus();
}

absl::Status RemoteBackend::EnqueueCopyTensor(Backend& src_backend,
                                              const Tensor& src, Tensor& dst) {
  FERRY_RETURN_IF_ERROR(CheckCopySizes(src, dst));
  auto* src_buffer =
      src.buffer == nullptr ? nullptr : dynamic_cast<RemoteBuffer*>(src.buffer);
  auto* src_remote = dynamic_cast<RemoteBackend*>(&src_backend);
  if (src_buffer == nullptr || src_remote == nullptr) {
    return Backend::EnqueueCopyTensor(src_backend, src, dst);
  }
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  FERRY_ASSIGN_OR_RETURN(RemoteBuffer * dst_buffer,
                         Resolve(dst, 0, bytes, "copy"));
  if (src_buffer->weights() || dst_buffer->weights()) {
    return absl::UnimplementedError(absl::StrCat(
        "copy from '", src.name, "' to '", dst.name,
        "': weights in a worker's own layout move through host memory"));
  }
  FERRY_ASSIGN_OR_RETURN(RemoteBuffer * from,
                         src_remote->Resolve(src, 0, bytes, "copy source"));
  FERRY_RETURN_IF_ERROR(connection_->status());
  if (bytes == 0) return absl::OkStatus();
  SendHeldGet();
  src_remote->SendHeldGet();
  if (src_remote->connection_ == connection_) {
    // Same worker: the worker's own backends copy, in this stream's order
    // after the source stream's work so far.
    Message m = Command(Cmd::kCopyLocal);
    m.stream = stream_;
    m.src_stream = src_remote->stream_;
    m.src_buffer = from->id();
    m.src_offset = from->OffsetOf(src);
    m.buffer = dst_buffer->id();
    m.offset = dst_buffer->OffsetOf(dst);
    m.size = bytes;
    connection_->Send(std::move(m));
    Enqueued();
    return absl::OkStatus();
  }
  // Another worker: it sends the bytes straight to this one once its
  // stream has produced them; this stream takes them in its order.
  FERRY_RETURN_IF_ERROR(src_remote->connection_->status());
  const uint64_t transfer = connection_->NewId();
  Message recv = Command(Cmd::kRecvFromPeer);
  recv.stream = stream_;
  recv.buffer = dst_buffer->id();
  recv.offset = dst_buffer->OffsetOf(dst);
  recv.size = bytes;
  recv.id = transfer;
  connection_->Send(std::move(recv));
  Enqueued();
  Message send = Command(Cmd::kSendToPeer);
  send.stream = src_remote->stream_;
  send.buffer = from->id();
  send.offset = from->OffsetOf(src);
  send.size = bytes;
  send.text = connection_->worker().ToString();
  send.value = connection_->session();
  send.cap = connection_->capability();
  send.id = transfer;
  // Should the sending stream fail before it has sent (its worker died, or
  // cannot reach this one), this worker is told at once rather than
  // waiting out its transfer timeout. Watched first: the send's end may
  // come back at once.
  src_remote->connection_->WatchPeerSend(src_remote->stream_, transfer,
                                         connection_);
  src_remote->connection_->Send(std::move(send));
  src_remote->Enqueued();
  return absl::OkStatus();
}

absl::Status RemoteBackend::EnqueueCompute(NodeSpan nodes) {
  std::vector<uint64_t> buffers;
  auto locate_fn = [&](const Tensor& t) -> absl::StatusOr<remote::WirePlace> {
    FERRY_ASSIGN_OR_RETURN(remote::WirePlace place,
                           device_.Locate(t, connection_.get()));
    if (std::find(buffers.begin(), buffers.end(), place.buffer) ==
        buffers.end()) {
      buffers.push_back(place.buffer);
    }
    return place;
  };
  remote::WireLocate locate = locate_fn;
  FERRY_ASSIGN_OR_RETURN(std::string blob, remote::EncodeNodes(nodes, &locate));
  bool any = false;
  for (Tensor* node : nodes) any = any || IsComputeOp(node->op);
  if (!any) return absl::OkStatus();
  FERRY_RETURN_IF_ERROR(connection_->status());
  FERRY_ASSIGN_OR_RETURN(
      uint64_t id,
      device_.GraphId(connection_, std::move(blob), std::move(buffers)));
  SendHeldGet();
  connection_->SyncTracing();
  Message m = Command(Cmd::kLaunch);
  m.stream = stream_;
  m.id = id;
  connection_->Send(std::move(m));
  Enqueued();
  return absl::OkStatus();
}

void RemoteBackend::SendHeldGet(uint64_t record) {
  if (!held_get_.has_value()) return;
  HeldGet get = *std::move(held_get_);
  held_get_.reset();
  get.m.value = record;
  connection_->Get(std::move(get.m), get.data, get.tag);
}

Event RemoteBackend::Record() {
  if (!dirty_) return last_;
  dirty_ = false;
  const uint64_t value = ++last_value_;
  if (held_get_.has_value() && held_get_->tag == value) {
    SendHeldGet(value);  // The get's reply signals `value`.
  } else {
    SendHeldGet();
    Message m = Command(Cmd::kRecord);
    m.stream = stream_;
    m.value = value;
    connection_->Send(std::move(m));
  }
  last_ =
      Event(timeline_, value, &device_,
            std::make_shared<RemoteEvent>(connection_.get(), stream_, value));
  return last_;
}

absl::Status RemoteBackend::EnqueueWait(const Event& event) {
  if (event.IsComplete()) return absl::OkStatus();
  FERRY_RETURN_IF_ERROR(connection_->status());
  SendHeldGet();
  auto* native = dynamic_cast<const RemoteEvent*>(event.native().get());
  if (native != nullptr && native->connection == connection_.get()) {
    Message m = Command(Cmd::kWaitStream);
    m.stream = stream_;
    m.src_stream = native->stream;
    m.value = native->value;
    connection_->Send(std::move(m));
    Enqueued();
    return absl::OkStatus();
  }
  // Held on the worker by a gate this process opens when the event
  // completes (or fails).
  const uint64_t gate = connection_->NewId();
  host_waits_.push_back(event);
  Message m = Command(Cmd::kWaitGate);
  m.stream = stream_;
  m.id = gate;
  connection_->Send(std::move(m));
  std::weak_ptr<Connection> weak = connection_;
  connection_->OnEvent(event, [weak, gate](absl::Status status) {
    std::shared_ptr<Connection> c = weak.lock();
    if (c == nullptr) return;
    Message signal = Command(Cmd::kSignalGate);
    signal.id = gate;
    signal.set_status(status);
    c->Send(std::move(signal));
  });
  Enqueued();
  return absl::OkStatus();
}

absl::Status RemoteBackend::Synchronize() {
  Event event = Record();
  // A short round trip may be over before a sleeping thread would wake:
  // receive the reply here for a little while before blocking.
  connection_->Drive([&] {
    return event.IsComplete() || !timeline_->status().ok() ||
           !connection_->alive();
  });
  absl::Status status = event.WaitBlocking();
  if (status.ok()) return status;
  FERRY_RETURN_IF_ERROR(connection_->status());
  // Clear the worker stream's failure, then start a fresh timeline.
  Message m = Command(Cmd::kResetStream);
  m.stream = stream_;
  absl::Status reset = connection_->Call(std::move(m)).status();
  timeline_ = std::make_shared<TimelineSemaphore>(last_value_);
  connection_->ResetStream(stream_, timeline_, last_value_);
  last_ = Event();
  dirty_ = false;
  host_waits_.clear();
  if (!reset.ok()) return reset;
  return status;
}

absl::Status RemoteBackend::EnqueueLoadFile(Tensor& tensor, size_t offset,
                                            size_t size, absl::string_view path,
                                            uint64_t file_offset) {
  FERRY_ASSIGN_OR_RETURN(RemoteBuffer * buffer,
                         Resolve(tensor, offset, size, "load"));
  FERRY_RETURN_IF_ERROR(connection_->status());
  SendHeldGet();
  Message m = Command(Cmd::kLoadFile);
  m.stream = stream_;
  m.buffer = buffer->id();
  m.text = std::string(path);
  m.blob = buffer->RefOf(tensor);
  // In pieces for a weight, as EnqueueSetTensor sends it.
  const size_t piece = buffer->weights() ? kWeightPiece : size;
  size_t done = 0;
  do {
    Message part = m;
    part.offset = buffer->OffsetOf(tensor, offset + done);
    part.size = std::min(piece, size - done);
    part.value = file_offset + done;
    done += part.size;
    connection_->Send(std::move(part));
  } while (done < size);
  Enqueued();
  return absl::OkStatus();
}

std::string TokenFrom(absl::string_view options) {
  for (absl::string_view item : absl::StrSplit(options, ',')) {
    if (absl::StartsWith(item, "token=")) {
      return std::string(item.substr(6));
    }
  }
  const char* env = std::getenv("FERRY_WORKER_TOKEN");
  return env == nullptr ? "" : env;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> MakeRemoteDevice(
    absl::string_view address, absl::string_view options) {
  FERRY_ASSIGN_OR_RETURN(remote::RemoteDeviceAddress parsed,
                         remote::ParseRemoteDeviceAddress(address));
  const std::string token = TokenFrom(options);
  if (token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "remote:", address,
        ": no token (set FERRY_WORKER_TOKEN or the family option token=)"));
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c,
                         Connection::Get(parsed.worker, token));
  std::string served;
  for (uint32_t i = 0; i < c->devices().size(); ++i) {
    const DeviceInfo& info = c->devices()[i];
    if (info.name == parsed.device) {
      return std::unique_ptr<Device>(
          new RemoteDevice(absl::StrCat("remote:", address), parsed.worker,
                           parsed.device, token, c, i, info));
    }
    absl::StrAppend(&served, served.empty() ? "" : ", ", info.name);
  }
  return absl::NotFoundError(absl::StrCat("worker ", parsed.worker.ToString(),
                                          " serves no device '", parsed.device,
                                          "' (it serves: ", served, ")"));
}

absl::Status RegisterRemoteFamily(Registry& registry) {
  if (registry.HasAddressFamily("remote")) return absl::OkStatus();
  return registry.RegisterAddressFamily(
      "remote",
      [](absl::string_view address) {
        return remote::ParseRemoteDeviceAddress(address).status();
      },
      [](absl::string_view address, absl::string_view options) {
        return MakeRemoteDevice(address, options);
      });
}

RemoteTraffic GetRemoteTraffic() {
  return RemoteTraffic{Connection::bytes_sent.load(),
                       Connection::bytes_received.load()};
}

std::vector<DeviceCounters> RemoteDevice::engine_stats() const {
  std::shared_ptr<Connection> c = current_connection();
  if (!c->alive()) return {};
  Message m = Command(Cmd::kEngineStats);
  m.device = index();
  absl::StatusOr<Message> reply = c->Call(std::move(m), absl::Seconds(10));
  if (!reply.ok()) return {};
  std::vector<DeviceCounters> out;
  for (absl::string_view line :
       absl::StrSplit(reply->text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    DeviceCounters e;
    if (f.size() != 4 || !absl::SimpleAtoi(f[1], &e.busy_ns) ||
        !absl::SimpleAtoi(f[2], &e.ops) || !absl::SimpleAtoi(f[3], &e.bytes)) {
      return {};
    }
    // All of them are this device's (the worker answers for one device).
    e.name = LocalName(f[0]).value_or(absl::StrCat(name_, "/", f[0]));
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status RemoteDevice::CollectTrace(TraceRecorder& into) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, connection());
  c->SyncTracing();
  // The worker's clock minus this host's: a ping reads it between sending
  // and receiving, taken as the middle; the shortest of a few round trips
  // bounds the error best (half of it; exact on one host).
  int64_t offset = 0;
  int64_t best = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const int64_t sent = TraceRecorder::NowNanos();
    FERRY_ASSIGN_OR_RETURN(Message pong, c->Call(Command(Cmd::kPing)));
    const int64_t received = TraceRecorder::NowNanos();
    if (received - sent < best) {
      best = received - sent;
      offset = static_cast<int64_t>(pong.value) - (sent + best / 2);
    }
  }
  FERRY_ASSIGN_OR_RETURN(Message reply, c->Call(Command(Cmd::kTraceSpans)));
  FERRY_ASSIGN_OR_RETURN(std::vector<remote::WireSpan> spans,
                         remote::DecodeTraceSpans(reply.blob));
  for (const remote::WireSpan& s : spans) {
    // The worker's recorder holds all its devices' tracks: this one's only.
    std::optional<std::string> track = LocalName(s.track);
    if (!track.has_value()) continue;
    into.Insert(into.Track(*track), s.name, s.begin_ns - offset,
                s.end_ns - offset);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> GetWorkerStats(Device& device) {
  auto* remote = dynamic_cast<RemoteDevice*>(&device);
  if (remote == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.name(), " is not a remote device"));
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, remote->connection());
  FERRY_ASSIGN_OR_RETURN(Message reply, c->Call(Command(Cmd::kStats)));
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(reply.text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InternalError(absl::StrCat("bad stats '", reply.text, "'"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::string> GetRemoteTransports(Device& device) {
  auto* remote = dynamic_cast<RemoteDevice*>(&device);
  if (remote == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.name(), " is not a remote device"));
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<Connection> c, remote->connection());
  return c->transports();
}

absl::Status EnqueueLoadFromWorkerFile(Backend& backend, Tensor& tensor,
                                       size_t offset, size_t size,
                                       absl::string_view path,
                                       uint64_t file_offset) {
  auto* remote = dynamic_cast<RemoteBackend*>(&backend);
  if (remote == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(backend.name(), " is not a remote backend"));
  }
  return remote->EnqueueLoadFile(tensor, offset, size, path, file_offset);
}

bool IsRemoteDevice(const Device& device) {
  return dynamic_cast<const RemoteDevice*>(&device) != nullptr;
}

}  // namespace ferry
