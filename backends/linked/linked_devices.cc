#include "ferry/backends/linked/linked_devices.h"

#include "ferry/backends/cpu/cpu_backend.h"
#include "ferry/backends/remote/client/remote_device.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/runtime/status_macros.h"
#ifdef FERRY_LINKS_CUDA
#include "ferry/backends/cuda/cuda_device.h"
#endif

namespace ferry {

absl::Status RegisterLinkedDevices(Registry& registry) {
  FERRY_RETURN_IF_ERROR(RegisterCpuDevice(registry));
  FERRY_RETURN_IF_ERROR(RegisterSimFamily(registry));
  FERRY_RETURN_IF_ERROR(RegisterRemoteFamily(registry));
#ifdef FERRY_LINKS_CUDA
  FERRY_RETURN_IF_ERROR(RegisterCudaFamily(registry));
#endif
  return absl::OkStatus();
}

}  // namespace ferry
