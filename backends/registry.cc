#include "ferry/backends/registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ferry/runtime/status_macros.h"

namespace ferry {
namespace {

bool IsFamilyChar(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }

// True for names a device list may hold: [a-z0-9_]+.
bool IsNameChar(char c) { return IsFamilyChar(c) || absl::ascii_isdigit(c); }

}  // namespace

bool SplitDeviceName(absl::string_view name, absl::string_view* family,
                     int* index) {
  size_t digits = name.size();
  while (digits > 0 && absl::ascii_isdigit(name[digits - 1])) --digits;
  if (digits == 0 || digits == name.size()) return false;
  for (size_t i = 0; i < digits; ++i) {
    if (!IsFamilyChar(name[i])) return false;
  }
  absl::string_view number = name.substr(digits);
  if (number.size() > 1 && number[0] == '0') return false;  // "sim00".
  if (number.size() > 6) return false;
  int value = 0;
  for (char c : number) value = value * 10 + (c - '0');
  *family = name.substr(0, digits);
  *index = value;
  return true;
}

Registry& Registry::Global() {
  static Registry* const registry = new Registry();
  return *registry;
}

Device* Registry::FindLocked(absl::string_view name) const {
  for (Device* device : devices_) {
    if (device->name() == name) return device;
  }
  return nullptr;
}

Registry::Family* Registry::FindFamilyLocked(absl::string_view name) {
  for (Family& family : families_) {
    if (family.name == name) return &family;
  }
  return nullptr;
}

std::string Registry::DeviceNamesLocked() const {
  std::vector<std::string> names;
  for (const Device* device : devices_) names.emplace_back(device->name());
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

std::string Registry::FamilyNamesLocked() const {
  std::vector<std::string> names;
  for (const Family& family : families_) names.push_back(family.name + "N");
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::Status Registry::RegisterDevice(std::unique_ptr<Device> device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("cannot register a null device");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (FindLocked(device->name()) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "a device named '", device->name(), "' is already registered"));
  }
  devices_.push_back(device.get());
  owned_.push_back(std::move(device));
  return absl::OkStatus();
}

absl::Status Registry::RegisterDevice(Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FindLocked(device.name()) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "a device named '", device.name(), "' is already registered"));
  }
  devices_.push_back(&device);
  return absl::OkStatus();
}

void Registry::RemoveDevice(Device* device) {
  std::unique_ptr<Device> doomed;  // Destroyed outside the lock.
  {
    std::lock_guard<std::mutex> lock(mu_);
    devices_.erase(std::remove(devices_.begin(), devices_.end(), device),
                   devices_.end());
    for (auto it = owned_.begin(); it != owned_.end(); ++it) {
      if (it->get() == device) {
        doomed = std::move(*it);
        owned_.erase(it);
        break;
      }
    }
  }
}

absl::Status Registry::RegisterFamily(std::string family,
                                      DeviceFactory factory) {
  if (family.empty() ||
      !std::all_of(family.begin(), family.end(), IsFamilyChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device family name '", family, "' is not lowercase letters and _"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (FindFamilyLocked(family) != nullptr ||
      FindAddressFamilyLocked(family) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "a device family named '", family, "' is already registered"));
  }
  families_.push_back(Family{std::move(family), std::move(factory), {}});
  return absl::OkStatus();
}

absl::Status Registry::RegisterAddressFamily(std::string family,
                                             AddressCheck check,
                                             AddressFactory factory) {
  if (family.empty() ||
      !std::all_of(family.begin(), family.end(), IsFamilyChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device family name '", family, "' is not lowercase letters and _"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (FindFamilyLocked(family) != nullptr ||
      FindAddressFamilyLocked(family) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "a device family named '", family, "' is already registered"));
  }
  address_families_.push_back(
      AddressFamily{std::move(family), std::move(check), std::move(factory)});
  return absl::OkStatus();
}

bool Registry::HasAddressFamily(absl::string_view family) const {
  std::lock_guard<std::mutex> lock(mu_);
  return FindAddressFamilyLocked(family) != nullptr;
}

const Registry::AddressFamily* Registry::FindAddressFamilyLocked(
    absl::string_view name) const {
  for (const AddressFamily& f : address_families_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::StatusOr<Device*> Registry::AddAddressDevice(
    const std::string& name, const CreateBackendsOptions& options) {
  const size_t colon = name.find(':');
  const std::string family = name.substr(0, colon);
  AddressFactory factory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Device* existing = FindLocked(name)) return existing;
    const AddressFamily* f = FindAddressFamilyLocked(family);
    if (f == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no address family '", family, "'"));
    }
    factory = f->factory;
  }
  auto it = options.family_options.find(family);
  // Connecting may take a while: not under the lock.
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Device> device,
                         factory(absl::string_view(name).substr(colon + 1),
                                 it == options.family_options.end()
                                     ? ""
                                     : absl::string_view(it->second)));
  if (device->name() != name) {
    return absl::InternalError(absl::StrCat(
        "family '", family, "' made '", device->name(), "' for '", name, "'"));
  }
  Device* raw = device.get();
  FERRY_RETURN_IF_ERROR(RegisterDevice(std::move(device)));
  return raw;
}

bool Registry::HasFamily(absl::string_view family) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(families_.begin(), families_.end(),
                     [&](const Family& f) { return f.name == family; });
}

absl::StatusOr<Device*> Registry::AddDevice(absl::string_view family_name,
                                            int index,
                                            absl::string_view options) {
  if (index < 0 || index >= kMaxFamilyIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat("device index ", index, " of family '", family_name,
                     "' is outside [0, ", kMaxFamilyIndex, ")"));
  }
  const std::string name = absl::StrCat(family_name, index);
  DeviceFactory factory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Family* family = FindFamilyLocked(family_name);
    if (family == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("no device family '", family_name,
                       "' (registered: ", FamilyNamesLocked(), ")"));
    }
    if (FindLocked(name) != nullptr || family->in_progress.count(index) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("a device named '", name, "' is already registered"));
    }
    family->in_progress.insert(index);
    factory = family->factory;
  }
  absl::StatusOr<std::unique_ptr<Device>> made = factory(index, options);
  std::lock_guard<std::mutex> lock(mu_);
  FindFamilyLocked(family_name)->in_progress.erase(index);
  if (!made.ok()) {
    return absl::Status(
        made.status().code(),
        absl::StrCat("making device '", name, "': ", made.status().message()));
  }
  Device* device = made->get();
  if (device == nullptr || device->name() != name) {
    return absl::InternalError(absl::StrCat("device family '", family_name,
                                            "' made a device not named '", name,
                                            "'"));
  }
  devices_.push_back(device);
  owned_.push_back(*std::move(made));
  return device;
}

absl::StatusOr<Device*> Registry::AddDevice(absl::string_view family,
                                            absl::string_view options) {
  int index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Family* f = FindFamilyLocked(family);
    while (index < kMaxFamilyIndex &&
           (FindLocked(absl::StrCat(family, index)) != nullptr ||
            (f != nullptr && f->in_progress.count(index) > 0))) {
      ++index;
    }
  }
  return AddDevice(family, index, options);
}

std::vector<Device*> Registry::devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

absl::StatusOr<Device*> Registry::FindDevice(absl::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (Device* device = FindLocked(name)) return device;
  return absl::NotFoundError(absl::StrCat(
      "no device named '", name, "' (registered: ", DeviceNamesLocked(), ")"));
}

Device* Registry::FindDevice(DeviceType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (Device* device : devices_) {
    if (device->type() == type) return device;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> Registry::CreateBackend(
    absl::string_view name, absl::string_view params) const {
  FERRY_ASSIGN_OR_RETURN(Device * device, FindDevice(name));
  return device->CreateBackend(params);
}

absl::StatusOr<std::unique_ptr<Backend>> Registry::CreateBackend() const {
  for (DeviceType type : {DeviceType::kGpu, DeviceType::kIGpu,
                          DeviceType::kAccel, DeviceType::kCpu}) {
    if (Device* device = FindDevice(type)) return device->CreateBackend();
  }
  return absl::NotFoundError("no devices are registered");
}

absl::StatusOr<BackendList> Registry::CreateBackends(
    absl::string_view list, const CreateBackendsOptions& options) {
  // Parse and check everything before making anything.
  std::vector<std::string> names;
  struct ToMake {
    std::string family;
    int index;
  };
  std::vector<ToMake> to_make;
  std::vector<std::string> addresses_to_make;  // family:ADDRESS items.
  {
    std::lock_guard<std::mutex> lock(mu_);
    int position = 0;
    for (absl::string_view item : absl::StrSplit(list, ',')) {
      ++position;
      const std::string quoted = absl::StrCat("'", item, "'");
      if (item.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device list '", list, "': item ", position, " is empty"));
      }
      const size_t colon = item.find(':');
      if (colon != absl::string_view::npos) {
        const absl::string_view family = item.substr(0, colon);
        const AddressFamily* f = FindAddressFamilyLocked(family);
        if (f == nullptr) {
          return absl::NotFoundError(absl::StrCat(
              "device list '", list, "': item ", quoted,
              ": no address family '", family, "'",
              address_families_.empty() ? " (none registered)" : ""));
        }
        absl::Status valid = f->check(item.substr(colon + 1));
        if (!valid.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("device list '", list, "': item ", quoted, ": ",
                           valid.message()));
        }
        if (std::find(names.begin(), names.end(), item) != names.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "device list '", list, "': ", quoted, " is listed twice"));
        }
        names.emplace_back(item);
        if (FindLocked(item) == nullptr) addresses_to_make.emplace_back(item);
        continue;
      }
      if (!std::all_of(item.begin(), item.end(), IsNameChar)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device list '", list, "': item ", quoted,
            " is not a device name (lowercase letters, digits and _, no "
            "spaces)"));
      }
      if (std::find(names.begin(), names.end(), item) != names.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "device list '", list, "': ", quoted, " is listed twice"));
      }
      names.emplace_back(item);
      if (FindLocked(item) != nullptr) continue;
      absl::string_view family;
      int index = 0;
      if (!SplitDeviceName(item, &family, &index) ||
          FindFamilyLocked(family) == nullptr) {
        return absl::NotFoundError(absl::StrCat(
            "device list '", list, "': no device ", quoted,
            " (devices: ", DeviceNamesLocked(), "; families, made on demand: ",
            FamilyNamesLocked(), ", with N a number without leading zeros)"));
      }
      if (index >= kMaxFamilyIndex) {
        return absl::InvalidArgumentError(
            absl::StrCat("device list '", list, "': ", quoted, ": index above ",
                         kMaxFamilyIndex - 1));
      }
      to_make.push_back(ToMake{std::string(family), index});
    }
  }
  std::sort(to_make.begin(), to_make.end(),
            [](const ToMake& a, const ToMake& b) {
              return std::tie(a.family, a.index) < std::tie(b.family, b.index);
            });
  std::vector<Device*> made;
  BackendList out;
  auto roll_back = [&](absl::Status status) {
    out.backends.clear();
    out.owned.clear();
    for (auto it = made.rbegin(); it != made.rend(); ++it) RemoveDevice(*it);
    return status;
  };
  for (const ToMake& m : to_make) {
    auto it = options.family_options.find(m.family);
    absl::StatusOr<Device*> device = AddDevice(
        m.family, m.index,
        it == options.family_options.end() ? ""
                                           : absl::string_view(it->second));
    if (!device.ok()) return roll_back(device.status());
    made.push_back(*device);
  }
  for (const std::string& name : addresses_to_make) {
    absl::StatusOr<Device*> device = AddAddressDevice(name, options);
    if (!device.ok()) {
      return roll_back(absl::Status(
          device.status().code(),
          absl::StrCat("device '", name, "': ", device.status().message())));
    }
    made.push_back(*device);
  }
  for (const std::string& name : names) {
    auto it = options.backend_params.find(name);
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateBackend(name, it == options.backend_params.end()
                                ? ""
                                : absl::string_view(it->second));
    if (!backend.ok()) {
      return roll_back(
          absl::Status(backend.status().code(),
                       absl::StrCat("creating a backend on '", name,
                                    "': ", backend.status().message())));
    }
    out.backends.push_back(backend->get());
    out.owned.push_back(*std::move(backend));
  }
  return out;
}

}  // namespace ferry
