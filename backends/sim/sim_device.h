// The simulated device: a real backend that behaves like a discrete GPU, on
// a host without one.
//
// SimDevice has device memory the host cannot use directly (its buffer type
// is not host; in debug builds host code that dereferences it faults), four
// in-order engines (compute, h2d, d2h, d2d) that run concurrently, pinned
// host memory it copies asynchronously, and a time model: kernels cost
// launch + max(flops / FLOP/s, bytes / bandwidth) (graph/op_cost.h), copies
// latency + bytes / bandwidth, and the modelled clock decides when work
// completes (see internal/sim_engine.h). Kernels are the CPU kernels, so
// results are exact. Devices are configured by SimConfig (sim_config.h) and
// the family "sim" of the registry makes them: `Registry::Global().AddDevice(
// "sim", "mem=8GiB,h2d=25GB/s")` gives sim0, then sim1, ...
//
// Typical use:
//   FERRY_ASSIGN_OR_RETURN(Device* sim, Registry::Global().AddDevice("sim"));
//   FERRY_ASSIGN_OR_RETURN(auto buffer,
//                          sim->default_buffer_type()->Allocate(bytes));
//   FERRY_ASSIGN_OR_RETURN(auto backend, sim->CreateBackend());
//   backend->EnqueueSetTensor(...); backend->EnqueueCompute(...); ...
#ifndef FERRY_BACKENDS_SIM_SIM_DEVICE_H_
#define FERRY_BACKENDS_SIM_SIM_DEVICE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/event.h"
#include "ferry/backends/sim/sim_config.h"
#include "ferry/backends/sim/sim_stats.h"
#include "ferry/graph/tensor.h"

namespace ferry {

class Registry;
class SimDevice;
namespace sim_internal {
class SimEngine;
class SimMemory;
struct SimWork;
}  // namespace sim_internal

// Registers the device family "sim" in `registry` (nothing if a family of
// that name is there already): registry.AddDevice("sim", "mem=8GiB") or a
// device list naming sim0, sim1... makes simulated devices.
absl::Status RegisterSimFamily(Registry& registry);

// A simulated device's own memory: not host memory. Buffer::base() and
// Tensor::data are device addresses; the host moves data only through the
// buffer's Set/Get/Memset/Copy or a SimBackend. Allocations are accounted
// against the device's `mem`. Thread-safe.
class SimBufferType final : public BufferType {
 public:
  // CUDA's allocation granularity for tensors.
  static constexpr size_t kAlignment = 256;

  absl::string_view name() const override;
  size_t alignment() const override { return kAlignment; }
  size_t max_size() const override;
  bool is_host() const override { return false; }
  Device* device() const override;
  // Fails with ResourceExhausted beyond the device's free memory (or when a
  // fault is injected), InvalidArgument above max_size().
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

  SimDevice& sim_device() const { return *device_; }

 private:
  friend class SimDevice;
  explicit SimBufferType(SimDevice* device) : device_(device) {}

  SimDevice* device_;
};

// Pinned host memory offered by a simulated device (its host_buffer_type()):
// host memory that sim copy engines transfer asynchronously and at full
// bandwidth, from any sim device. Thread-safe.
class SimPinnedBufferType final : public BufferType {
 public:
  absl::string_view name() const override { return name_; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  Device* device() const override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;

 private:
  friend class SimDevice;
  SimPinnedBufferType(SimDevice* device, std::string name)
      : device_(device), name_(std::move(name)) {}

  SimDevice* device_;
  std::string name_;
};

// A simulated accelerator. Buffers, backends and work on it must end before
// it is destroyed (devices in the registry live for the process).
// Thread-safe.
class SimDevice final : public Device {
 public:
  // Makes a device named `name` (e.g. "sim0").
  static absl::StatusOr<std::unique_ptr<SimDevice>> Create(
      std::string name, const SimConfig& config = {});
  // Same, parsing `config` with ParseSimConfig.
  static absl::StatusOr<std::unique_ptr<SimDevice>> Create(
      std::string name, absl::string_view config);
  // Waits for the engines to run what is queued.
  ~SimDevice() override;

  absl::string_view name() const override { return name_; }
  DeviceProps props() const override;
  // Takes no params (an empty string).
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  BufferType* host_buffer_type() override { return &pinned_type_; }
  // Registers the caller's host memory as pinned (copies with it are then
  // asynchronous, as after cudaHostRegister) while the returned buffer
  // lives. AlreadyExists if it is pinned already.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size) override;
  // OK when `node`'s op is in the configured op set and the CPU kernels
  // compute it; otherwise which of the two refuses it.
  absl::Status CheckOp(const Tensor& node) const override;
  // Only the device's own memory.
  bool SupportsBufferType(const BufferType* type) const override;
  // Worth running here with host-resident weights: batches of 32 or more
  // rows (as ggml's CUDA backend decides), except get_rows.
  bool OffloadOp(const Tensor& node) const override;

  const SimConfig& config() const { return config_; }
  // True when host code touching device memory faults.
  bool guarded() const;
  size_t memory_used() const;

  // Arms `faults`, counted from now (replacing armed ones).
  void SetFaults(const SimFaults& faults);

  SimEngineStats stats(SimEngineKind kind) const;
  // The same for every engine, as generic counters (modelled busy time).
  std::vector<DeviceCounters> engine_stats() const override;
  int64_t ClockNanos() const override { return ModelNowNanos(); }
  // Its engines hold later work for any event: device-side.
  EventWaitMode WaitMode(const Event&) const override {
    return EventWaitMode::kDevice;
  }
  void ResetStats();
  // The modelled clock now, in nanoseconds (shared by all sim devices with
  // the same time scale).
  int64_t ModelNowNanos() const;
  // Blocks until every engine has run what is queued on it.
  void Synchronize();

  // Returns the modelled time (ns) at which `event`, an event of a sim
  // backend, completed: FailedPrecondition if it has not, NotFound if no
  // sim engine completed it.
  static absl::StatusOr<int64_t> EventTime(const Event& event);

 private:
  friend class SimBackend;
  friend class SimBuffer;
  friend class SimBufferType;

  SimDevice(std::string name, const SimConfig& config);

  sim_internal::SimEngine& engine(SimEngineKind kind) const;
  // Runs the waits that no other work follows (Record() after Wait()), so
  // they hold up no engine.
  sim_internal::SimEngine& wait_engine() const { return *wait_engine_; }
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateDevice(size_t size);
  void FreeDevice(char* base, size_t size);
  // Returns the engine-side address of bytes [offset, offset + size) of
  // `tensor`, which must be in this device's memory.
  absl::StatusOr<char*> TensorAlias(const Tensor& tensor, size_t offset,
                                    size_t size, absl::string_view what) const;
  char* Translate(const void* address, size_t size) const;
  // Counts one operation against an armed fault; true if it must fail.
  static bool TakeFault(std::atomic<int64_t>& countdown);
  bool TakeCopyFault() { return TakeFault(fail_copy_); }
  bool TakeKernelFault() { return TakeFault(fail_kernel_); }
  int64_t CopyNanos(size_t bytes, double bandwidth, bool latency = true) const;
  int64_t KernelNanos(int64_t flops, int64_t bytes) const;
  // Runs `body` on `kind`'s engine and waits for it (synchronous buffer
  // operations, which belong to no stream).
  absl::Status RunSync(
      SimEngineKind kind,
      absl::AnyInvocable<absl::Status(std::vector<sim_internal::SimWork>&) &&>
          body);
  // Scratch for the compute engine's kernels; compute worker only.
  void* ComputeScratch(size_t bytes);

  const std::string name_;
  const SimConfig config_;
  std::unique_ptr<sim_internal::SimMemory> memory_;
  SimBufferType buffer_type_;
  SimPinnedBufferType pinned_type_;
  mutable std::mutex mu_;
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> fail_alloc_{0};
  std::atomic<int64_t> fail_copy_{0};
  std::atomic<int64_t> fail_kernel_{0};
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> scratch_;  // Compute worker only.
  size_t scratch_bytes_ = 0;
  // Last: their workers finish before the memory goes.
  std::array<std::unique_ptr<sim_internal::SimEngine>, kNumSimEngines> engines_;
  std::unique_ptr<sim_internal::SimEngine> wait_engine_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_SIM_DEVICE_H_
