// Registry: the devices a program uses, found by name or type.
//
// Nothing registers itself before main: a program registers the kinds of
// device it links, explicitly, and nothing touches a driver until then.
//   Registry& registry = Registry::Global();
//   FERRY_RETURN_IF_ERROR(RegisterCpuDevice(registry));   // backends/cpu
//   FERRY_RETURN_IF_ERROR(RegisterSimFamily(registry));   // backends/sim
//   FERRY_RETURN_IF_ERROR(RegisterCudaFamily(registry));  // backends/cuda
// or RegisterLinkedDevices(registry) (backends/linked) for every kind the
// binary links. A device family makes devices on demand, named family +
// index ("sim0", "cuda1"), from an options string.
//
// CreateBackends("sim0,sim1,cpu") is the one parser of device lists that
// every program and test shares: each comma-separated name is a registered
// device, or a family's device that is made if missing (sim3 is made as
// sim3, whatever else exists). Names are exact: whitespace, empty items,
// "sim00", "sim-1", "sim+1" and repeats are errors naming the item.
// An item "family:ADDRESS" names a device of an address family (devices
// elsewhere, e.g. "remote:10.0.0.2:7000/sim0", backends/remote): the
// family checks the address's syntax before anything is made, and the
// device is made (connected) if no device of that exact name exists.
#ifndef FERRY_BACKENDS_REGISTRY_H_
#define FERRY_BACKENDS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/device.h"

namespace ferry {

// Options for Registry::CreateBackends.
struct CreateBackendsOptions {
  // Options for a family's new devices, by family ("sim" ->
  // "mem=8GiB,h2d=25GB/s"); devices that exist already keep theirs.
  std::map<std::string, std::string> family_options;
  // Backend parameters by device name ("cpu" -> "threads=4").
  std::map<std::string, std::string> backend_params;
};

// Backends made by CreateBackends, in the list's order.
struct BackendList {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;  // owned[i].get(), for the scheduler.
};

// Thread-safe. Devices live as long as the registry.
class Registry {
 public:
  // Makes device `index` of a family from `options` (the family's own
  // syntax). It must be named family + index.
  using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>(
      int index, absl::string_view options)>;
  // Checks an address family's ADDRESS syntax, without connecting.
  using AddressCheck = std::function<absl::Status(absl::string_view address)>;
  // Makes the device at `address` from the family's `options`; it must be
  // named family + ":" + address.
  using AddressFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>(
      absl::string_view address, absl::string_view options)>;
  // Family indices are below this (a typo must not make thousands).
  static constexpr int kMaxFamilyIndex = 64;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // A process-wide registry, empty until the program registers devices.
  static Registry& Global();

  // Takes ownership. AlreadyExists if a device of that name is registered.
  absl::Status RegisterDevice(std::unique_ptr<Device> device);
  // Registers a device the caller keeps alive longer than the registry.
  absl::Status RegisterDevice(Device& device);
  // AlreadyExists if the family name is taken. The name is lowercase
  // letters and underscores.
  absl::Status RegisterFamily(std::string family, DeviceFactory factory);
  bool HasFamily(absl::string_view family) const;
  // Registers a family whose devices are named "family:ADDRESS" (same name
  // rules as RegisterFamily; the name space is shared with them).
  absl::Status RegisterAddressFamily(std::string family, AddressCheck check,
                                     AddressFactory factory);
  bool HasAddressFamily(absl::string_view family) const;

  // Makes and registers device `index` of `family` from `options` and
  // returns it. A failed factory call registers nothing and uses up no
  // name. AlreadyExists if that device exists.
  absl::StatusOr<Device*> AddDevice(absl::string_view family, int index,
                                    absl::string_view options = "");
  // The same with the lowest index not in use.
  absl::StatusOr<Device*> AddDevice(absl::string_view family,
                                    absl::string_view options = "");

  std::vector<Device*> devices() const;
  // NotFound names the devices that exist.
  absl::StatusOr<Device*> FindDevice(absl::string_view name) const;
  // The first device of `type`, or nullptr.
  Device* FindDevice(DeviceType type) const;

  // Finds the device called `name` and creates a backend on it.
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
      absl::string_view name, absl::string_view params = "") const;
  // A backend on the best device: a GPU, else an integrated GPU, else an
  // accelerator, else the CPU.
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend() const;

  // Parses `list` (see the top of this file), makes the family devices it
  // names that are missing (in index order), then a backend on each device
  // in list order. Everything is checked before anything is made; on a
  // later failure the backends and devices made by this call are removed.
  absl::StatusOr<BackendList> CreateBackends(
      absl::string_view list, const CreateBackendsOptions& options = {});

 private:
  struct Family {
    std::string name;
    DeviceFactory factory;
    std::set<int> in_progress;  // Indices being made now.
  };
  // The device called `name`, or nullptr.
  Device* FindLocked(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct AddressFamily {
    std::string name;
    AddressCheck check;
    AddressFactory factory;
  };
  Family* FindFamilyLocked(absl::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const AddressFamily* FindAddressFamilyLocked(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes and registers the device `name` (family:address).
  absl::StatusOr<Device*> AddAddressDevice(
      const std::string& name, const CreateBackendsOptions& options);
  std::string DeviceNamesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string FamilyNamesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unregisters (and destroys, if owned) a device made by CreateBackends
  // that is being rolled back.
  void RemoveDevice(Device* device);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Device>> owned_ ABSL_GUARDED_BY(mu_);
  std::vector<Device*> devices_ ABSL_GUARDED_BY(mu_);  // In order.
  std::vector<Family> families_ ABSL_GUARDED_BY(mu_);
  std::vector<AddressFamily> address_families_ ABSL_GUARDED_BY(mu_);
};

// Splits a device name into family and index: "sim12" -> ("sim", 12).
// False unless the name is lowercase letters/underscores then a decimal
// index without leading zeros.
bool SplitDeviceName(absl::string_view name, absl::string_view* family,
                     int* index);

}  // namespace ferry

#endif  // FERRY_BACKENDS_REGISTRY_H_
