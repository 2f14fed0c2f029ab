#include "ferry/backends/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {

Registry& Registry::Global() {
  static Registry* const registry = new Registry();
  return *registry;
}

absl::Status Registry::RegisterDevice(std::unique_ptr<Device> device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("cannot register a null device");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& existing : devices_) {
    if (existing->name() == device->name()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "a device named '", device->name(), "' is already registered"));
    }
  }
  devices_.push_back(std::move(device));
  return absl::OkStatus();
}

absl::Status Registry::RegisterFamily(std::string family,
                                      DeviceFactory factory) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Family& f : families_) {
    if (f.name == family) {
      return absl::AlreadyExistsError(absl::StrCat(
          "a device family named '", family, "' is already registered"));
    }
  }
  families_.push_back(Family{std::move(family), std::move(factory), 0});
  return absl::OkStatus();
}

absl::StatusOr<Device*> Registry::AddDevice(absl::string_view family,
                                            absl::string_view options) {
  DeviceFactory factory;
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> names;
    for (Family& f : families_) {
      if (f.name == family) {
        factory = f.factory;
        index = f.next_index++;
        break;
      }
      names.push_back(f.name);
    }
    if (!factory) {
      return absl::NotFoundError(
          absl::StrCat("no device family '", family,
                       "' (known: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                         factory(index, options));
  Device* raw = device.get();
  FERRY_RETURN_IF_ERROR(RegisterDevice(std::move(device)));
  return raw;
}

std::vector<Device*> Registry::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Device*> result;
  result.reserve(devices_.size());
  for (const auto& device : devices_) result.push_back(device.get());
  return result;
}

absl::StatusOr<Device*> Registry::FindDevice(absl::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& device : devices_) {
    if (device->name() == name) return device.get();
    names.emplace_back(device->name());
  }
  return absl::NotFoundError(
      absl::StrCat("no device named '", name,
                   "' (registered: ", absl::StrJoin(names, ", "), ")"));
}

Device* Registry::FindDevice(DeviceType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& device : devices_) {
    if (device->type() == type) return device.get();
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> Registry::CreateBackend(
    absl::string_view name, absl::string_view params) const {
  FERRY_ASSIGN_OR_RETURN(Device * device, FindDevice(name));
  return device->CreateBackend(params);
}

absl::StatusOr<std::unique_ptr<Backend>> Registry::CreateBestBackend() const {
  for (DeviceType type : {DeviceType::kGpu, DeviceType::kIGpu,
                          DeviceType::kAccel, DeviceType::kCpu}) {
    if (Device* device = FindDevice(type)) return device->CreateBackend();
  }
  return absl::NotFoundError("no devices are registered");
}

}  // namespace ferry
