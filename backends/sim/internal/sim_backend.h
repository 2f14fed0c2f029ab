// SimBackend: a stream on a simulated device, like a CUDA stream.
//
// Work is in order within the backend, but each operation runs on the
// device engine it needs: uploads on h2d, downloads on d2h, copies from
// other sim devices on d2d, kernels on compute. The engines are the
// device's, shared by all its backends (one copy engine per direction, one
// compute engine, each first-in first-out), so two streams overlap copies
// with compute, and their copies share the link as on hardware. An
// operation that waits for an event holds its engine's queue until then,
// as on a GPU with one hardware queue per engine; waits followed by no work
// (Record() right after Wait()) hold no engine.
//
// Transfers with host memory in a pinned buffer (the device's
// host_buffer_type(), of any sim device) are asynchronous; with pageable
// memory they run at the pageable bandwidth and return only once done, as
// cudaMemcpyAsync does with pageable memory.
//
// Failures (an injected fault, a failed event waited on) fail this
// backend's timeline only: its events and the work queued after report the
// failure, Synchronize() returns and clears it, and other backends on the
// device keep working.
#ifndef FERRY_BACKENDS_SIM_INTERNAL_SIM_BACKEND_H_
#define FERRY_BACKENDS_SIM_INTERNAL_SIM_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/event.h"
#include "ferry/backends/sim/internal/sim_engine.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/backends/sim/sim_stats.h"
#include "ferry/graph/tensor.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

// Thread-compatible (one enqueuer at a time).
class SimBackend final : public Backend {
 public:
  // Work already queued still runs; the device must outlive it.
  ~SimBackend() override = default;

  absl::string_view name() const override { return device_.name(); }
  Device& device() const override { return device_; }
  SimDevice& sim_device() const { return device_; }

  absl::Status EnqueueSetTensor(Tensor& tensor, const void* data, size_t offset,
                                size_t size) override;
  absl::Status EnqueueGetTensor(const Tensor& tensor, void* data, size_t offset,
                                size_t size) override;
  // Copies from another sim device's memory on this device's d2d engine at
  // the d2d bandwidth, and within this device at its memory bandwidth
  // (reading and writing); host-resident sides as Backend's.
  absl::Status EnqueueCopyTensor(Backend& src_backend, const Tensor& src,
                                 Tensor& dst) override;
  // Tensors must be in this device's memory (a status names the node or
  // source that is not). Node metadata is read now; the data when the
  // kernels run.
  absl::Status EnqueueCompute(NodeSpan nodes) override;
  Event Record() override;
  absl::Status EnqueueWait(const Event& event) override;
  absl::Status Synchronize() override;

 private:
  friend class SimDevice;
  explicit SimBackend(SimDevice& device);

  // Queues `body` on `kind`'s engine after this backend's previous work,
  // the pending waits and `waits`; returns its event.
  Event Submit(SimEngineKind kind, std::vector<Event> waits,
               sim_internal::SimEngine::Body body);
  Event Submit(sim_internal::SimEngine& engine, std::vector<Event> waits,
               sim_internal::SimEngine::Body body);
  // Waits for `event` (of a synchronous, pageable transfer); on failure
  // synchronizes (clearing it) and returns the failure.
  absl::Status Finish(const Event& event);

  SimDevice& device_;
  std::shared_ptr<TimelineSemaphore> timeline_;
  uint64_t last_value_ = 0;
  Event last_;                  // Completes when everything submitted has.
  std::vector<Event> pending_;  // From Wait(), for the next operation.
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_INTERNAL_SIM_BACKEND_H_
