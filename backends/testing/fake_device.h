// FakeDevice and FakeBackend: a test double of an accelerator, for tests of
// code that drives backends (the scheduler, the registry), as IREE's mock
// device is for its HAL. Test-only; not a real device.
//
// A fake device has "device memory" that is host memory the host must not
// touch (its buffer type is not host), pinned host memory it copies
// asynchronously, the ops a test chooses, and backends that run operations
// in order on one worker with the CPU kernels, so results are exact. Every
// operation is logged with what it touched, and transfers with pageable
// host memory block the caller until done (as cudaMemcpyAsync does): a test
// reads the log to check that code never blocked on a device, and can hold
// a backend's work back (Hold) to check that nothing waits for it.
#ifndef FERRY_BACKENDS_TESTING_FAKE_DEVICE_H_
#define FERRY_BACKENDS_TESTING_FAKE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/stream.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry::testing {

struct FakeDeviceOptions {
  DeviceType type = DeviceType::kAccel;
  // The ops it runs; null: every op the CPU kernels run.
  std::function<bool(const Tensor& node)> supports_op;
  // Whether it takes ops whose weight is in host memory; null: never.
  std::function<bool(const Tensor& node)> offload_op;
  bool host_buffer = true;  // Offers pinned host memory.
  bool events = true;
  size_t memory_bytes = size_t{1} << 30;
};

// One operation a fake backend was asked to do.
struct FakeOp {
  enum class Kind { kSet, kGet, kCopy, kCompute, kWait, kRecord };
  Kind kind;
  std::string backend;
  std::string tensor;  // The tensor written (set, copy) or read (get).
  size_t bytes = 0;
  bool pageable = false;  // A transfer with pageable host memory.
  int nodes = 0;          // Computed nodes (compute).
};

class FakeDevice;

// Pinned host memory of fake devices: any fake device copies it
// asynchronously. Thread-safe.
class FakePinnedBufferType final : public BufferType {
 public:
  absl::string_view name() const override { return name_; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  friend class FakeDevice;
  FakePinnedBufferType(FakeDevice* device, std::string name)
      : device_(device), name_(std::move(name)) {}
  FakeDevice* device_;
  std::string name_;
};

// A fake device's memory (host addresses, but not host memory to callers).
// Thread-safe.
class FakeMemoryType final : public BufferType {
 public:
  absl::string_view name() const override;
  size_t alignment() const override { return 256; }
  bool is_host() const override { return false; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  friend class FakeDevice;
  explicit FakeMemoryType(FakeDevice* device) : device_(device) {}
  FakeDevice* device_;
};

// Thread-safe.
class FakeDevice final : public Device {
 public:
  static std::unique_ptr<FakeDevice> Create(std::string name,
                                            FakeDeviceOptions options = {});

  absl::string_view name() const override { return name_; }
  DeviceProps props() const override;
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &memory_type_; }
  BufferType* host_buffer_type() override {
    return options_.host_buffer ? &pinned_type_ : nullptr;
  }
  // Registers the range as pinned (as cudaHostRegister), for as long as
  // the returned buffer lives.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size) override;
  absl::Status CheckOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override {
    return type == &memory_type_;
  }
  bool OffloadOp(const Tensor& node) const override {
    return options_.offload_op && options_.offload_op(node);
  }
  EventWaitMode WaitMode(const Event&) const override {
    return EventWaitMode::kDevice;
  }

  // The next compute enqueued on any of its backends fails with `status`
  // when it runs (once).
  void FailNextCompute(absl::Status status);
  // The next CreateBackend fails with `status` (once), as a device that
  // went away does.
  void FailNextCreateBackend(absl::Status status);

  // Every operation of its backends, in the order they were enqueued.
  std::vector<FakeOp> log() const;
  void ClearLog();
  // Bytes of device memory in use.
  size_t memory_used() const;

  // True if [data, data + size) is pinned memory of any fake device.
  static bool IsPinned(const void* data, size_t size);

 private:
  friend class FakeBackend;
  friend class FakeMemoryType;
  friend class FakePinnedBufferType;
  FakeDevice(std::string name, FakeDeviceOptions options);

  void Log(FakeOp op);
  absl::Status TakeComputeFailure();
  absl::Status Reserve(size_t size);
  void Release(size_t size);

  const std::string name_;
  const FakeDeviceOptions options_;
  FakeMemoryType memory_type_;
  FakePinnedBufferType pinned_type_;
  mutable std::mutex mu_;
  std::vector<FakeOp> log_ ABSL_GUARDED_BY(mu_);
  absl::Status next_compute_failure_ ABSL_GUARDED_BY(mu_);
  absl::Status next_create_backend_failure_ ABSL_GUARDED_BY(mu_);
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

// Work held back by FakeBackend::Hold until Open() (or destruction).
// Thread-safe.
class FakeGate {
 public:
  FakeGate() : semaphore_(std::make_shared<TimelineSemaphore>(0)) {}
  ~FakeGate() { Open(); }
  FakeGate(const FakeGate&) = delete;
  FakeGate& operator=(const FakeGate&) = delete;
  void Open() {
    if (semaphore_->Value() < 1) (void)semaphore_->Signal(1);
  }
  Event event() const { return Event(semaphore_, 1); }

 private:
  std::shared_ptr<TimelineSemaphore> semaphore_;
};

// Thread-compatible, like every Backend.
class FakeBackend final : public Backend {
 public:
  absl::string_view name() const override { return name_; }
  Device& device() const override { return device_; }

  absl::Status EnqueueSetTensor(Tensor& tensor, const void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueGetTensor(const Tensor& tensor, void* data, size_t offset,
                                size_t size) override;
  // Copies between fake devices' memory directly; host sides as Backend's.
  absl::Status EnqueueCopyTensor(Backend& src_backend, const Tensor& src,
                                 Tensor& dst) override;
  absl::Status EnqueueCompute(NodeSpan nodes) override;
  Event Record() override;
  absl::Status EnqueueWait(const Event& event) override;
  absl::Status Synchronize() override { return stream_.Synchronize(); }

  // Holds every later operation until `gate` opens.
  void Hold(const FakeGate& gate) { stream_.EnqueueWait(gate.event()); }

 private:
  friend class FakeDevice;
  explicit FakeBackend(FakeDevice& device);
  // Checks that `tensor` is in this device's memory, with [offset, offset +
  // size) inside it.
  absl::Status CheckDeviceTensor(const Tensor& tensor, size_t offset,
                                 size_t size, absl::string_view what) const;

  FakeDevice& device_;
  std::string name_;
  Stream stream_;
};

// Registers the family "fake" (fake0, fake1, ...) with `options` for every
// device it makes (the options string must be empty).
absl::Status RegisterFakeFamily(Registry& registry,
                                FakeDeviceOptions options = {});

}  // namespace ferry::testing

#endif  // FERRY_BACKENDS_TESTING_FAKE_DEVICE_H_
