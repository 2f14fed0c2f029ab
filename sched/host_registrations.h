// HostRegistrations: pageable host memory that devices copy from every
// batch (weights in the CPU's memory offloaded to a device), registered
// with the device (Device::BufferFromHostPointer, cudaHostRegister's role)
// so those copies are asynchronous. Registration is process-wide, so each
// buffer is registered once, with the first device that needs it, and kept
// while plans use it.
#ifndef FERRY_SCHED_HOST_REGISTRATIONS_H_
#define FERRY_SCHED_HOST_REGISTRATIONS_H_

#include <memory>
#include <utility>
#include <vector>

#include "ferry/alloc/graph_signature.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/buffer.h"
#include "ferry/sched/partition.h"

namespace ferry {

// Thread-compatible.
class HostRegistrations {
 public:
  // Registers the preset host buffers that `partition`'s copies read for a
  // device, keeping registrations still needed and dropping the others.
  // Buffers of `pinned_type` or of a device's host_buffer_type() are pinned
  // already. A device that cannot register leaves its copies synchronous.
  void Update(const GraphSignature& signature, const Partition& partition,
              const std::vector<Backend*>& backends,
              const BufferType* pinned_type);
  void Clear() { registered_.clear(); }
  int size() const { return static_cast<int>(registered_.size()); }

 private:
  std::vector<std::pair<const Buffer*, std::unique_ptr<Buffer>>> registered_;
};

}  // namespace ferry

#endif  // FERRY_SCHED_HOST_REGISTRATIONS_H_
