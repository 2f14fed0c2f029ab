// RegisterLinkedDevices: registers every kind of device this build links,
// in one call, for programs that want them all (the main program, tests
// that take device lists).
//
//   FERRY_RETURN_IF_ERROR(RegisterLinkedDevices(Registry::Global()));
//   FERRY_ASSIGN_OR_RETURN(BackendList list,
//                          Registry::Global().CreateBackends("sim0,cpu"));
//
// Registers the CPU device, the "sim" family, the "remote" address family
// (devices on ferry workers, "remote:HOST:PORT/DEV") and, where the CUDA
// toolkit was found at build time, the "cuda" family (whose devices touch the
// driver only when a list names one). Safe to call again.
#ifndef FERRY_BACKENDS_LINKED_LINKED_DEVICES_H_
#define FERRY_BACKENDS_LINKED_LINKED_DEVICES_H_

#include "absl/status/status.h"
#include "ferry/backends/registry.h"

namespace ferry {

absl::Status RegisterLinkedDevices(Registry& registry);

}  // namespace ferry

#endif  // FERRY_BACKENDS_LINKED_LINKED_DEVICES_H_
