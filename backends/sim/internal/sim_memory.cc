#include "ferry/backends/sim/internal/sim_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace sim_internal {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

absl::Status ErrnoError(absl::string_view what, size_t size, int error) {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " of ", size, " bytes failed: ", std::strerror(error)));
}

}  // namespace

SimMemory::~SimMemory() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (const auto& [base, region] : regions_) {
    munmap(reinterpret_cast<void*>(base), region.mapped);
    if (region.alias != reinterpret_cast<char*>(base)) {
      munmap(region.alias, region.mapped);
    }
  }
}

absl::StatusOr<char*> SimMemory::Map(size_t size) {
  const size_t page = PageSize();
  const size_t mapped = std::max<size_t>(page, (size + page - 1) / page * page);
  char* device = nullptr;
  char* alias = nullptr;
  if (!guarded_) {
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ErrnoError("mmap", size, errno);
    device = alias = static_cast<char*>(p);
  } else {
    const int fd = memfd_create("ferry-sim", MFD_CLOEXEC);
    if (fd < 0) return ErrnoError("memfd_create", size, errno);
    if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
      const int error = errno;
      close(fd);
      return ErrnoError("ftruncate", size, error);
    }
    void* d =
        mmap(nullptr, mapped, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    const int d_error = errno;
    void* a = d == MAP_FAILED ? MAP_FAILED
                              : mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_NORESERVE, fd, 0);
    const int a_error = errno;
    close(fd);  // The mappings keep the memory alive.
    if (d == MAP_FAILED) return ErrnoError("mmap", size, d_error);
    if (a == MAP_FAILED) {
      munmap(d, mapped);
      return ErrnoError("mmap", size, a_error);
    }
    device = static_cast<char*>(d);
    alias = static_cast<char*>(a);
  }
  std::unique_lock<std::shared_mutex> lock(mu_);
  regions_[reinterpret_cast<uintptr_t>(device)] = Region{size, mapped, alias};
  return device;
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
  munmap(device_address, region.mapped);
  if (region.alias != device_address) munmap(region.alias, region.mapped);
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
