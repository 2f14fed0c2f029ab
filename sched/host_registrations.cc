#include "ferry/sched/host_registrations.h"

#include <algorithm>

namespace ferry {

void HostRegistrations::Update(const GraphSignature& signature,
                               const Partition& partition,
                               const std::vector<Backend*>& backends,
                               const BufferType* pinned_type) {
  std::vector<std::pair<const Buffer*, std::unique_ptr<Buffer>>> kept;
  auto is_pinned = [&](const BufferType* type) {
    if (type == pinned_type) return true;
    for (Backend* backend : backends) {
      if (backend->device().host_buffer_type() == type) return true;
    }
    return false;
  };
  for (const InputCopy& copy : partition.copies) {
    if (copy.user_input) continue;
    const int owner = signature.wiring(copy.source).owner;
    const Buffer* buffer = signature.key(owner).buffer;
    Device& device = backends[copy.dst_backend]->device();
    if (buffer == nullptr || !buffer->is_host() || is_pinned(buffer->type()) ||
        !device.props().caps.buffer_from_host_ptr ||
        device.type() == DeviceType::kCpu) {
      continue;
    }
    auto in = [buffer](const auto& entry) { return entry.first == buffer; };
    if (std::any_of(kept.begin(), kept.end(), in)) continue;
    auto old = std::find_if(registered_.begin(), registered_.end(), in);
    if (old != registered_.end()) {
      kept.push_back(std::move(*old));
      continue;
    }
    absl::StatusOr<std::unique_ptr<Buffer>> registration =
        device.BufferFromHostPointer(buffer->base(), buffer->size());
    if (registration.ok()) kept.emplace_back(buffer, *std::move(registration));
  }
  registered_ = std::move(kept);
}

}  // namespace ferry
