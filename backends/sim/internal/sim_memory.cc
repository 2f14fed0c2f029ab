#include "ferry/backends/sim/internal/sim_memory.h"

#include "ferry/runtime/guarded_mapping.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace sim_internal {

SimMemory::~SimMemory() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (const auto& [base, region] : regions_) {
    UnmapGuarded({reinterpret_cast<char*>(base), region.alias, region.mapped});
  }
}

absl::StatusOr<char*> SimMemory::Map(size_t size) {
  FERRY_ASSIGN_OR_RETURN(const GuardedMapping m,
                         MapGuarded(size, guarded_, "ferry-sim"));
  std::unique_lock<std::shared_mutex> lock(mu_);
  regions_[reinterpret_cast<uintptr_t>(m.device)] =
      Region{size, m.mapped, m.alias};
  return m.device;
}

void SimMemory::Unmap(char* device_address) {
  Region region;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(device_address));
    FERRY_CHECK(it != regions_.end());
    region = it->second;
    regions_.erase(it);
  }
  UnmapGuarded({device_address, region.alias, region.mapped});
}

char* SimMemory::Translate(const void* address, size_t size) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address);
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = regions_.upper_bound(begin);
  if (it == regions_.begin()) return nullptr;
  --it;
  const uintptr_t base = it->first;
  const Region& region = it->second;
  const uintptr_t offset = begin - base;
  if (offset > region.size || size > region.size - offset) return nullptr;
  return region.alias + offset;
}

PinnedRanges& PinnedRanges::Global() {
  static PinnedRanges* const ranges = new PinnedRanges();
  return *ranges;
}

void PinnedRanges::Add(const void* begin, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  ranges_[reinterpret_cast<uintptr_t>(begin)] = size;
}

void PinnedRanges::Remove(const void* begin) {
  std::lock_guard<std::mutex> lock(mu_);
  ranges_.erase(reinterpret_cast<uintptr_t>(begin));
}

bool PinnedRanges::Contains(const void* begin, size_t size) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(begin);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) return false;
  --it;
  const uintptr_t offset = address - it->first;
  return offset <= it->second && size <= it->second - offset;
}

}  // namespace sim_internal
}  // namespace ferry
