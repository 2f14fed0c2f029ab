// Memory a simulated device hands out, mapped so that host code which
// touches a device address by mistake faults: the device address is a
// PROT_NONE mapping of a memfd and the simulator reads and writes the same
// bytes through a second, writable mapping of it (the alias). Unguarded, both
// are one private anonymous mapping. Used by the sim backend and the fake
// CUDA runtime.
#ifndef FERRY_RUNTIME_GUARDED_MAPPING_H_
#define FERRY_RUNTIME_GUARDED_MAPPING_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace ferry {

struct GuardedMapping {
  char* device = nullptr;  // The address handed out.
  char* alias = nullptr;   // The same bytes, writable (== device unguarded).
  size_t mapped = 0;       // Bytes mapped at each: whole pages, at least one.
};

// Maps `size` bytes, guarded or not; `name` names the memfd (seen in
// /proc/self/maps). ResourceExhausted, naming the failed call, if the
// kernel refuses. Thread-safe.
absl::StatusOr<GuardedMapping> MapGuarded(size_t size, bool guarded,
                                          const char* name);

// Unmaps both mappings of `mapping`. Thread-safe.
void UnmapGuarded(const GuardedMapping& mapping);

}  // namespace ferry

#endif  // FERRY_RUNTIME_GUARDED_MAPPING_H_
