#include "ferry/backends/testing/fake_device.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/backends/host/kernels/kernel_runner.h"
#include "ferry/backends/host/kernels/kernels.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/node_snapshot.h"
#include "ferry/graph/op.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::testing {
namespace {

// Pinned ranges of every fake device, by start address.
std::mutex pinned_mu;
std::map<uintptr_t, size_t>& PinnedRanges() {
  static auto* const ranges = new std::map<uintptr_t, size_t>();
  return *ranges;
}

void Pin(const void* data, size_t size) {
  std::lock_guard<std::mutex> lock(pinned_mu);
  PinnedRanges()[reinterpret_cast<uintptr_t>(data)] = size;
}

void Unpin(const void* data) {
  std::lock_guard<std::mutex> lock(pinned_mu);
  PinnedRanges().erase(reinterpret_cast<uintptr_t>(data));
}

// Host memory behind every fake buffer: the device's own (not host to its
// callers), pinned host memory, or a caller's memory registered in place.
// `release` runs when it goes (frees, unpins, gives back the device's
// memory account).
class FakeBuffer final : public HostBuffer {
 public:
  FakeBuffer(BufferType* type, void* base, size_t size,
             std::function<void()> release)
      : HostBuffer(type, base, size, /*owned=*/false),
        release_(std::move(release)) {}
  ~FakeBuffer() override { release_(); }

  // No direct copies, as a real device's buffer: Buffer's default (the
  // caller stages through the host), not HostBuffer's memcpy.
  absl::Status CopyTensorFrom(const Tensor& src, Tensor& dst) override {
    return Buffer::CopyTensorFrom(src, dst);
  }

 private:
  std::function<void()> release_;
};

// A pinned host buffer: registered while it lives; freed if `owned`.
std::unique_ptr<Buffer> PinnedBuffer(BufferType* type, void* base, size_t size,
                                     bool owned) {
  Pin(base, size);
  return std::make_unique<FakeBuffer>(type, base, size, [base, owned] {
    Unpin(base);
    if (owned) std::free(base);
  });
}

void* AlignedAlloc(size_t size) {
  const size_t rounded = (std::max<size_t>(size, 1) + 255) / 256 * 256;
  return std::aligned_alloc(256, rounded);
}

}  // namespace

Device* FakePinnedBufferType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> FakePinnedBufferType::Allocate(
    size_t size) {
  void* base = AlignedAlloc(size);
  if (base == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": cannot allocate ", size, " bytes"));
  }
  return PinnedBuffer(this, base, size, /*owned=*/true);
}

absl::string_view FakeMemoryType::name() const { return device_->name(); }
Device* FakeMemoryType::device() const { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> FakeMemoryType::Allocate(size_t size) {
  FERRY_RETURN_IF_ERROR(device_->Reserve(size));
  void* base = AlignedAlloc(size);
  if (base == nullptr) {
    device_->Release(size);
    return absl::ResourceExhaustedError(
        absl::StrCat(device_->name(), ": cannot allocate ", size, " bytes"));
  }
  FakeDevice* device = device_;
  return std::make_unique<FakeBuffer>(this, base, size, [device, base, size] {
    std::free(base);
    device->Release(size);
  });
}

std::unique_ptr<FakeDevice> FakeDevice::Create(std::string name,
                                               FakeDeviceOptions options) {
  return std::unique_ptr<FakeDevice>(
      new FakeDevice(std::move(name), std::move(options)));
}

FakeDevice::FakeDevice(std::string name, FakeDeviceOptions options)
    : name_(std::move(name)),
      options_(std::move(options)),
      memory_type_(this),
      pinned_type_(this, absl::StrCat(name_, "_host")) {}

DeviceProps FakeDevice::props() const {
  DeviceProps props;
  props.name = name_;
  props.description = "fake device (test double)";
  props.type = options_.type;
  props.memory_total = options_.memory_bytes;
  props.memory_free = options_.memory_bytes - memory_used();
  props.caps.async = true;
  props.caps.host_buffer = options_.host_buffer;
  props.caps.buffer_from_host_ptr = true;
  props.caps.events = options_.events;
  return props;
}

absl::StatusOr<std::unique_ptr<Backend>> FakeDevice::CreateBackend(
    absl::string_view params) {
  if (!params.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": backends take no parameters"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!next_create_backend_failure_.ok()) {
      return std::exchange(next_create_backend_failure_, absl::OkStatus());
    }
  }
  return std::unique_ptr<Backend>(new FakeBackend(*this));
}

absl::StatusOr<std::unique_ptr<Buffer>> FakeDevice::BufferFromHostPointer(
    void* data, size_t size) {
  if (data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot register a null pointer"));
  }
  return PinnedBuffer(&pinned_type_, data, size, /*owned=*/false);
}

absl::Status FakeDevice::CheckOp(const Tensor& node) const {
  FERRY_RETURN_IF_ERROR(cpu_kernels::CheckSupported(node));
  if (options_.supports_op && !options_.supports_op(node)) {
    return absl::UnimplementedError(
        absl::StrCat(name(), ": the test's supports_op refuses ",
                     OpName(node.op), " '", node.name, "'"));
  }
  return absl::OkStatus();
}

std::vector<FakeOp> FakeDevice::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void FakeDevice::ClearLog() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
}

size_t FakeDevice::memory_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

bool FakeDevice::IsPinned(const void* data, size_t size) {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(pinned_mu);
  auto it = PinnedRanges().upper_bound(begin);
  if (it == PinnedRanges().begin()) return false;
  --it;
  return begin - it->first <= it->second &&
         size <= it->second - (begin - it->first);
}

void FakeDevice::FailNextCreateBackend(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  next_create_backend_failure_ = std::move(status);
}

void FakeDevice::FailNextCompute(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  next_compute_failure_ = std::move(status);
}

absl::Status FakeDevice::TakeComputeFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(next_compute_failure_, absl::OkStatus());
}

void FakeDevice::Log(FakeOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  log_.push_back(std::move(op));
}

absl::Status FakeDevice::Reserve(size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (size > options_.memory_bytes - used_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": out of memory: ", size, " bytes asked, ",
                     options_.memory_bytes - used_, " free"));
  }
  used_ += size;
  return absl::OkStatus();
}

void FakeDevice::Release(size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= size;
}

FakeBackend::FakeBackend(FakeDevice& device)
    : device_(device), name_(device.name()), stream_(name_, &device) {}

absl::Status FakeBackend::CheckDeviceTensor(const Tensor& tensor, size_t offset,
                                            size_t size,
                                            absl::string_view what) const {
  if (tensor.buffer == nullptr || tensor.data == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": ", what, " of '", tensor.name, "', which has no memory"));
  }
  if (tensor.buffer->type() != device_.default_buffer_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", what, " of '", tensor.name, "', in ",
                     tensor.buffer->type()->name(), " memory"));
  }
  const size_t bytes = static_cast<size_t>(tensor.NumBytes());
  if (offset > bytes || size > bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": ", what, " of '",
                                              tensor.name, "' out of range"));
  }
  return absl::OkStatus();
}

absl::Status FakeBackend::EnqueueSetTensor(Tensor& tensor, const void* data,
                                           size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckDeviceTensor(tensor, offset, size, "set"));
  const bool pageable = !FakeDevice::IsPinned(data, size);
  device_.Log({FakeOp::Kind::kSet, name_, tensor.name, size, pageable, 0});
  char* dst = static_cast<char*>(tensor.data) + offset;
  Event done = stream_.Enqueue([dst, data, size] {
    std::memcpy(dst, data, size);
    return absl::OkStatus();
  });
  return pageable ? done.WaitBlocking() : absl::OkStatus();
}

absl::Status FakeBackend::EnqueueGetTensor(const Tensor& tensor, void* data,
                                           size_t offset, size_t size) {
  FERRY_RETURN_IF_ERROR(CheckDeviceTensor(tensor, offset, size, "get"));
  const bool pageable = !FakeDevice::IsPinned(data, size);
  device_.Log({FakeOp::Kind::kGet, name_, tensor.name, size, pageable, 0});
  const char* src = static_cast<const char*>(tensor.data) + offset;
  Event done = stream_.Enqueue([src, data, size] {
    std::memcpy(data, src, size);
    return absl::OkStatus();
  });
  return pageable ? done.WaitBlocking() : absl::OkStatus();
}

absl::Status FakeBackend::EnqueueCopyTensor(Backend& src_backend,
                                            const Tensor& src, Tensor& dst) {
  const bool src_fake =
      src.buffer != nullptr && !src.buffer->is_host() &&
      dynamic_cast<const FakeMemoryType*>(src.buffer->type()) != nullptr;
  if (!src_fake) return Backend::EnqueueCopyTensor(src_backend, src, dst);
  FERRY_RETURN_IF_ERROR(CheckCopySizes(src, dst));
  const size_t bytes = static_cast<size_t>(src.NumBytes());
  FERRY_RETURN_IF_ERROR(CheckDeviceTensor(dst, 0, bytes, "copy"));
  device_.Log({FakeOp::Kind::kCopy, name_, dst.name, bytes, false, 0});
  if (&src_backend != this) stream_.EnqueueWait(src_backend.Record());
  const void* from = src.data;
  void* to = dst.data;
  stream_.Enqueue([from, to, bytes] {
    std::memmove(to, from, bytes);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status FakeBackend::EnqueueCompute(NodeSpan nodes) {
  for (const Tensor* node : nodes) {
    if (node != nullptr && IsComputeOp(node->op)) {
      if (absl::Status op = device_.CheckOp(*node); !op.ok()) {
        return absl::Status(
            op.code(),
            absl::StrCat(name_, ": does not run '", node->name, "' (",
                         OpName(node->op), "): ", op.message()));
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(
      NodeSnapshot snapshot,
      NodeSnapshot::Make(nodes, [&](const Tensor& t) -> absl::StatusOr<void*> {
        FERRY_RETURN_IF_ERROR(CheckDeviceTensor(
            t, 0, static_cast<size_t>(t.NumBytes()), "compute"));
        return t.data;
      }));
  device_.Log({FakeOp::Kind::kCompute, name_, "", 0, false,
               static_cast<int>(snapshot.size())});
  absl::Status failure = device_.TakeComputeFailure();
  stream_.Enqueue(
      [snapshot = std::move(snapshot), failure = std::move(failure)]() mutable {
        if (!failure.ok()) return failure;
        cpu_kernels::KernelRunner runner(1);
        return runner.Run(snapshot.nodes(), nullptr, /*validate=*/false);
      });
  return absl::OkStatus();
}

Event FakeBackend::Record() {
  device_.Log({FakeOp::Kind::kRecord, name_, "", 0, false, 0});
  return stream_.Record();
}

absl::Status FakeBackend::EnqueueWait(const Event& event) {
  device_.Log({FakeOp::Kind::kWait, name_, "", 0, false, 0});
  stream_.EnqueueWait(event);
  return absl::OkStatus();
}

absl::Status RegisterFakeFamily(Registry& registry, FakeDeviceOptions options) {
  return registry.RegisterFamily(
      "fake",
      [options](int index, absl::string_view text)
          -> absl::StatusOr<std::unique_ptr<Device>> {
        if (!text.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("fake devices take no options (got '", text, "')"));
        }
        return std::unique_ptr<Device>(
            FakeDevice::Create(absl::StrCat("fake", index), options));
      });
}

}  // namespace ferry::testing
