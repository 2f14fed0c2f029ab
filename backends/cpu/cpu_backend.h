// The CPU device and backend.
//
// CpuDevice is the host: 64-byte-aligned host buffers, every op the CPU
// kernels implement (backends/host/kernels), and host pointers usable in
// place. CpuBackend is a stream: work is queued and runs in order on a
// team of `threads` threads with a barrier between nodes, as ggml's CPU
// backend does. The stream's worker runs it once an event is recorded, so a
// scheduler can queue CPU work and move on to other devices; work that is
// only synchronized runs on the thread calling Synchronize(), with no
// thread hand-off (StreamMode::kCallerRuns).
#ifndef FERRY_BACKENDS_CPU_CPU_BACKEND_H_
#define FERRY_BACKENDS_CPU_CPU_BACKEND_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/cpu/cpu_packed_buffer.h"
#include "ferry/backends/device.h"
#include "ferry/backends/host_buffer.h"
#include "ferry/backends/registry.h"
#include "ferry/backends/stream.h"

namespace ferry {

namespace cpu_kernels {
class KernelRunner;
}  // namespace cpu_kernels

// Thread-safe.
class CpuDevice final : public Device {
 public:
  CpuDevice();

  absl::string_view name() const override { return "cpu"; }
  DeviceProps props() const override;
  // params: "threads=N" (default: the machine's hardware threads).
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view params = "") override;
  BufferType* default_buffer_type() override { return &buffer_type_; }
  // The type weights should be placed in: matrices are stored in the GEMM's
  // panel layout when they are set, so mul_mat never re-packs them
  // (cpu_packed_buffer.h). Activations stay in default_buffer_type().
  BufferType* weights_buffer_type() override { return &packed_buffer_type_; }
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPointer(
      void* data, size_t size) override;
  absl::Status CheckOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType* type) const override;
  // Its stream worker holds later work: device-side for every event.
  EventWaitMode WaitMode(const Event&) const override {
    return EventWaitMode::kDevice;
  }
  // "cpu/compute": time the backends spent computing graphs.
  std::vector<DeviceCounters> engine_stats() const override;

 private:
  friend class CpuBackend;

  HostBufferType buffer_type_;
  CpuPackedBufferType packed_buffer_type_{this};
  std::atomic<int64_t> compute_ns_{0};
  std::atomic<int64_t> compute_ops_{0};
};

// Returns the process's CPU device, made on first use. It is in no registry
// until RegisterCpuDevice puts it there.
CpuDevice& GetCpuDevice();

// Registers GetCpuDevice() in `registry` as "cpu" (OK if it is there
// already; AlreadyExists if another device took the name).
absl::Status RegisterCpuDevice(Registry& registry);

struct CpuBackendOptions {
  int threads = 0;  // 0: the machine's hardware threads.
};

// Thread-compatible (one enqueuer at a time).
class CpuBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      CpuDevice& device, CpuBackendOptions options = {});
  ~CpuBackend() override;

  absl::string_view name() const override { return "cpu"; }
  Device& device() const override { return device_; }
  int threads() const { return threads_; }

  // Called between nodes while computing; returning true abandons the rest
  // of the graph, which then fails with Cancelled. Thread-safe to set.
  void SetAbortCallback(std::function<bool()> callback);

  absl::Status EnqueueSetTensor(Tensor& tensor, const void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueGetTensor(const Tensor& tensor, void* data, size_t offset,
                                size_t size) override;
  // Checks that every node and source is placed in host memory (a status
  // otherwise) and copies their metadata (backend.h, rule 1).
  absl::Status EnqueueCompute(NodeSpan nodes) override;
  Event Record() override { return stream_.Record(); }
  absl::Status EnqueueWait(const Event& event) override;
  absl::Status Synchronize() override { return stream_.Synchronize(); }

 private:
  CpuBackend(CpuDevice& device, int threads);

  CpuDevice& device_;
  const int threads_;
  std::unique_ptr<cpu_kernels::KernelRunner> runner_;
  const int compute_track_;  // Trace tracks (runtime/trace.h).
  const int copy_track_;
  std::shared_ptr<std::function<bool()>> abort_;
  std::mutex abort_mu_;
  Stream stream_;  // Last: its worker stops before the runner is destroyed.
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_CPU_CPU_BACKEND_H_
