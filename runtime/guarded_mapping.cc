#include "ferry/runtime/guarded_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry {
namespace {

absl::Status ErrnoError(const char* what, size_t size, int error) {
  return absl::ResourceExhaustedError(absl::StrCat(
      what, " of ", size, " bytes failed: ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<GuardedMapping> MapGuarded(size_t size, bool guarded,
                                          const char* name) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  GuardedMapping m;
  m.mapped = std::max<size_t>(page, (size + page - 1) / page * page);
  if (!guarded) {
    void* p = mmap(nullptr, m.mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return ErrnoError("mmap", size, errno);
    m.device = m.alias = static_cast<char*>(p);
    return m;
  }
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("memfd_create", size, errno);
  if (ftruncate(fd, static_cast<off_t>(m.mapped)) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError("ftruncate", size, error);
  }
  void* d =
      mmap(nullptr, m.mapped, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  const int d_error = errno;
  void* a = d == MAP_FAILED ? MAP_FAILED
                            : mmap(nullptr, m.mapped, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_NORESERVE, fd, 0);
  const int a_error = errno;
  close(fd);  // The mappings keep the memory alive.
  if (d == MAP_FAILED) return ErrnoError("mmap", size, d_error);
  if (a == MAP_FAILED) {
    munmap(d, m.mapped);
    return ErrnoError("mmap", size, a_error);
  }
  m.device = static_cast<char*>(d);
  m.alias = static_cast<char*>(a);
  return m;
}

void UnmapGuarded(const GuardedMapping& mapping) {
  munmap(mapping.device, mapping.mapped);
  if (mapping.alias != nullptr && mapping.alias != mapping.device) {
    munmap(mapping.alias, mapping.mapped);
  }
}

}  // namespace ferry
