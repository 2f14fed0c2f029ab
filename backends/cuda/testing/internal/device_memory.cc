#include "ferry/backends/cuda/testing/internal/device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/runtime/guarded_mapping.h"

namespace ferry::fake_cuda_internal {
namespace {

// Freed device ranges kept reserved before they are unmapped.
constexpr size_t kQuarantineBytes = size_t{1} << 30;
constexpr size_t kQuarantineEntries = 4096;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUpToPages(size_t size) {
  const size_t page = PageSize();
  return std::max<size_t>(page, (size + page - 1) / page * page);
}

absl::Status ErrnoError(absl::string_view what, size_t size, int error) {
  return absl::ResourceExhaustedError(
      absl::StrCat("fake CUDA: ", what, " of ", size,
                   " bytes failed: ", std::strerror(error)));
}

// The protection of every page of [begin, end) from /proc/self/maps: 'w'
// if all are writable, 'r' if some are read-only, '-' if some are unmapped.
char PagesAccess(uintptr_t begin, uintptr_t end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t covered = begin;
  char access = 'w';
  while (std::getline(maps, line) && covered < end) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3) {
      continue;
    }
    if (hi <= covered || lo >= end) continue;
    if (lo > covered) return '-';  // A hole.
    if (perms[0] != 'r') return '-';
    if (perms[1] != 'w') access = 'r';
    covered = hi;
  }
  return covered >= end ? access : '-';
}

}  // namespace

DeviceMemory::~DeviceMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* map : {&live_, &freed_}) {
    for (const auto& [base, a] : *map) {
      munmap(reinterpret_cast<void*>(base), a.mapped);
      if (a.alias != nullptr && a.alias != reinterpret_cast<char*>(base)) {
        munmap(a.alias, a.mapped);
      }
    }
  }
  for (const auto& [base, range] : host_) {
    if (range.allocated) std::free(reinterpret_cast<void*>(base));
  }
}

template <typename Map>
typename Map::const_iterator DeviceMemory::Containing(const Map& map,
                                                      uintptr_t address) {
  auto it = map.upper_bound(address);
  if (it == map.begin()) return map.end();
  --it;
  const size_t extent =
      std::max<size_t>(it->second.size, 1);  // A zero-size range holds none.
  if (address - it->first >= extent) return map.end();
  return it;
}

absl::StatusOr<void*> DeviceMemory::Allocate(int device, size_t size) {
  absl::StatusOr<GuardedMapping> m =
      MapGuarded(size, guarded_, "ferry-fake-cuda");
  if (!m.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fake CUDA: ", m.status().message()));
  }
  char* const address = m->device;
  char* const alias = m->alias;
  const size_t mapped = m->mapped;
  std::memset(alias, 0xff, size);  // Poison: cudaMalloc does not clear.
  std::lock_guard<std::mutex> lock(mu_);
  live_[reinterpret_cast<uintptr_t>(address)] =
      Allocation{device, size, mapped, alias};
  return static_cast<void*>(address);
}

bool DeviceMemory::Free(void* address, int* device, size_t* size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(address));
  if (it == live_.end()) return false;
  Allocation a = it->second;
  live_.erase(it);
  *device = a.device;
  *size = a.size;
  // The device range stays reserved (PROT_NONE); its bytes go.
  if (a.alias != reinterpret_cast<char*>(address)) {
    munmap(a.alias, a.mapped);
  } else {
    mprotect(address, a.mapped, PROT_NONE);
    madvise(address, a.mapped, MADV_DONTNEED);
  }
  a.alias = nullptr;
  freed_[reinterpret_cast<uintptr_t>(address)] = a;
  quarantine_order_.push_back(reinterpret_cast<uintptr_t>(address));
  quarantined_bytes_ += a.mapped;
  EvictQuarantineLocked();
  return true;
}

void DeviceMemory::EvictQuarantineLocked() {
  while (!quarantine_order_.empty() &&
         (quarantined_bytes_ > kQuarantineBytes ||
          quarantine_order_.size() > kQuarantineEntries)) {
    const uintptr_t base = quarantine_order_.front();
    quarantine_order_.pop_front();
    auto it = freed_.find(base);
    if (it == freed_.end()) continue;
    munmap(reinterpret_cast<void*>(base), it->second.mapped);
    quarantined_bytes_ -= it->second.mapped;
    freed_.erase(it);
  }
}

absl::StatusOr<void*> DeviceMemory::AllocateHost(size_t size) {
  void* p = std::aligned_alloc(PageSize(), RoundUpToPages(size));
  if (p == nullptr) return ErrnoError("aligned_alloc", size, ENOMEM);
  std::lock_guard<std::mutex> lock(mu_);
  host_[reinterpret_cast<uintptr_t>(p)] =
      HostRange{RoundUpToPages(size), /*allocated=*/true, false};
  return p;
}

bool DeviceMemory::FreeHost(void* address) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = host_.find(reinterpret_cast<uintptr_t>(address));
    if (it == host_.end() || !it->second.allocated) return false;
    host_.erase(it);
  }
  std::free(address);
  return true;
}

absl::Status DeviceMemory::Register(void* address, size_t size,
                                    bool read_only) {
  const uintptr_t page = PageSize();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address) / page * page;
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(address) + size + page - 1) / page * page;
  std::lock_guard<std::mutex> lock(mu_);
  // Registrations are page-granular: any shared page is a conflict.
  for (const auto& [base, range] : host_) {
    const uintptr_t lo = base / page * page;
    const uintptr_t hi = (base + range.size + page - 1) / page * page;
    if (lo < end && begin < hi) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "pages of [%p, +%d) are registered already (by [%p, +%d))", address,
          size, reinterpret_cast<void*>(base), range.size));
    }
  }
  const char access = PagesAccess(begin, end);
  if (access == '-') {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%p, +%d) is not mapped memory", address, size));
  }
  if (access == 'r' && !read_only) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "[%p, +%d) is read-only (register it with cudaHostRegisterReadOnly)",
        address, size));
  }
  host_[reinterpret_cast<uintptr_t>(address)] =
      HostRange{size, /*allocated=*/false, read_only};
  return absl::OkStatus();
}

bool DeviceMemory::Unregister(void* address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = host_.find(reinterpret_cast<uintptr_t>(address));
  if (it == host_.end() || it->second.allocated) return false;
  host_.erase(it);
  return true;
}

PointerInfo DeviceMemory::Classify(const void* address, size_t bytes) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = Containing(live_, p); it != live_.end()) {
    if (bytes <= it->second.size - (p - it->first)) {
      return PointerInfo{PointerKind::kDevice, it->second.device, it->first,
                         it->second.size};
    }
    return PointerInfo{PointerKind::kDeviceOverrun, it->second.device,
                       it->first, it->second.size};
  }
  if (auto it = Containing(freed_, p); it != freed_.end()) {
    return PointerInfo{PointerKind::kFreed, it->second.device, it->first,
                       it->second.size};
  }
  if (auto it = Containing(host_, p); it != host_.end()) {
    if (bytes <= it->second.size - (p - it->first)) {
      return PointerInfo{PointerKind::kPinned, -1, it->first, it->second.size};
    }
  }
  return PointerInfo{};
}

void* DeviceMemory::Translate(const void* address, size_t bytes) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = Containing(live_, p);
  if (it == live_.end()) return nullptr;
  const uintptr_t offset = p - it->first;
  if (bytes > it->second.size - offset) return nullptr;
  return it->second.alias + offset;
}

std::string DeviceMemory::Describe(const void* address) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = Containing(live_, p); it != live_.end()) {
    return absl::StrFormat("%p (byte %d of a %d-byte allocation on cuda%d)",
                           address, p - it->first, it->second.size,
                           it->second.device);
  }
  if (auto it = Containing(freed_, p); it != freed_.end()) {
    return absl::StrFormat(
        "%p (byte %d of a FREED %d-byte allocation of cuda%d)", address,
        p - it->first, it->second.size, it->second.device);
  }
  return absl::StrFormat("%p (no device allocation)", address);
}

}  // namespace ferry::fake_cuda_internal
