#include "ferry/examples/backend_list.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ferry/backends/linked/linked_devices.h"
#include "ferry/backends/registry.h"
#include "ferry/runtime/status_macros.h"

namespace ferry::examples {

std::vector<Device*> ExampleBackends::Devices() const {
  std::vector<Device*> out;
  for (Backend* backend : list) {
    Device* d = &backend->device();
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

absl::StatusOr<ExampleBackends> MakeBackends(const std::string& spec,
                                             const std::string& sim,
                                             int cpu_threads) {
  FERRY_RETURN_IF_ERROR(RegisterLinkedDevices(Registry::Global()));
  CreateBackendsOptions options;
  options.family_options["sim"] = sim;
  if (cpu_threads > 0) {
    options.backend_params["cpu"] = absl::StrCat("threads=", cpu_threads);
  }
  absl::StatusOr<BackendList> list =
      Registry::Global().CreateBackends(spec, options);
  if (!list.ok()) {
    return absl::Status(list.status().code(),
                        absl::StrCat("--backends: ", list.status().message()));
  }
  if (list->backends.back()->device().type() != DeviceType::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backends: '", spec, "' must end with cpu"));
  }
  ExampleBackends out;
  for (Backend* backend : list->backends) {
    out.list.push_back(backend);
    if (out.modelled == nullptr && backend->device().props().modelled_clock) {
      out.modelled = &backend->device();
    }
  }
  out.owned = std::move(list->owned);
  return out;
}

}  // namespace ferry::examples
