// Device: one piece of hardware (or a simulation of one) that can hold
// tensors and run ops. It answers what it can do (props, caps, supports_op,
// offload_op, how it waits for other devices' events), which buffer types it
// uses, and creates Backends (streams). Devices are made after main starts,
// by an explicit registration (registry.h); making one may not touch a
// driver until it is first used.
#ifndef FERRY_BACKENDS_DEVICE_H_
#define FERRY_BACKENDS_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/event.h"
#include "ferry/graph/tensor.h"

namespace ferry {

class Backend;
class TraceRecorder;

enum class DeviceType : uint8_t {
  kCpu,    // The host CPU.
  kGpu,    // A discrete GPU with its own memory.
  kIGpu,   // An integrated GPU sharing host memory.
  kAccel,  // Another accelerator (e.g. the simulated device).
};

absl::string_view DeviceTypeName(DeviceType type);

struct DeviceCaps {
  bool async = false;        // Async set/get/copy and compute.
  bool host_buffer = false;  // Offers a pinned host buffer type.
  bool buffer_from_host_ptr = false;
  bool events = false;  // Device-side event waits.
};

struct DeviceProps {
  std::string name;
  std::string description;
  DeviceType type = DeviceType::kCpu;
  size_t memory_free = 0;
  size_t memory_total = 0;
  DeviceCaps caps;
  // ClockNanos is modelled time (a simulated device), not the host's clock.
  bool modelled_clock = false;
};

// How later work on a device waits for an event (IREE's semaphore
// compatibility query). Either way the thread that enqueues never blocks.
enum class EventWaitMode : uint8_t {
  kDevice,  // The device's own queues hold the work until the event.
  kHost,    // Held on the host and issued when the event completes.
};

// What one of a device's engines (its compute engine, a copy engine) has
// done since the device was made: a generic counter every program can
// print without knowing the device's kind.
struct DeviceCounters {
  std::string name;     // e.g. "sim0/compute", "cpu/compute".
  int64_t busy_ns = 0;  // Time spent working (modelled time for sims).
  int64_t ops = 0;      // Operations completed.
  int64_t bytes = 0;    // Bytes copied (copy engines).
};
// Thread-safe.
class Device {
 public:
  virtual ~Device() = default;

  virtual absl::string_view name() const = 0;
  virtual DeviceProps props() const = 0;
  DeviceType type() const { return props().type; }

  // Creates a stream on this device. `params` is device-specific
  // (e.g. "threads=4" for the CPU).
  virtual absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") = 0;

  // The type of the device's own memory.
  virtual BufferType* default_buffer_type() = 0;
  // Where model loaders put weights this device computes with: a layout its
  // kernels read faster, set and read back through the buffer in the
  // logical layout (the CPU's panels, cpu_packed_buffer.h); by default the
  // device's own memory.
  virtual BufferType* weights_buffer_type() { return default_buffer_type(); }
  // Pinned host memory the device copies asynchronously; nullptr if none.
  virtual BufferType* host_buffer_type() { return nullptr; }
  // A buffer over host memory the device can use in place.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size);

  // OK if a backend of this device computes `node` correctly; otherwise
  // why not (Unimplemented or InvalidArgument naming the op, dtype or
  // layout at fault), which errors about the node pass on to the user.
  virtual absl::Status CheckOp(const Tensor& node) const = 0;
  // CheckOp(node).ok(): for callers that only choose where a node runs.
  bool SupportsOp(const Tensor& node) const { return CheckOp(node).ok(); }
  // True if ops on this device can use tensors in `type` directly.
  virtual bool SupportsBufferType(const BufferType* type) const = 0;
  // True if this device wants to run `node` even though its weight lives in
  // host memory (worth the copy, e.g. large batches).
  virtual bool OffloadOp(const Tensor& node) const;

  // How a backend of this device waits for `event` (Backend::EnqueueWait).
  // Default: kDevice for its own events and complete ones, kHost otherwise.
  virtual EventWaitMode WaitMode(const Event& event) const;

  // Per-engine counters (empty when the device keeps none).
  virtual std::vector<DeviceCounters> engine_stats() const { return {}; }
  // Adds to `into` the trace spans this device's engines recorded where
  // `into` cannot see them (a worker's, on another host), on `into`'s clock,
  // each once. Devices in this process record into the global recorder
  // directly: nothing to add.
  virtual absl::Status CollectTrace(TraceRecorder& into) {
    (void)into;
    return absl::OkStatus();
  }
  // The clock engine_stats and the device's trace spans are measured on, in
  // nanoseconds: the host's steady clock unless props().modelled_clock.
  virtual int64_t ClockNanos() const;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_DEVICE_H_
