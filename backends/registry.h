// Registry: the devices a process can use, found by name or type.
//
// Concrete backends register their devices at static-init time (their Bazel
// targets say so with alwayslink) or on demand through a device family: a
// named factory that makes devices from an options string ("sim" makes
// simulated devices from "mem=8GiB,h2d=25GB/s"). Names are unique.
#ifndef FERRY_BACKENDS_REGISTRY_H_
#define FERRY_BACKENDS_REGISTRY_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/backends/device.h"

namespace ferry {

// Thread-safe. Devices live as long as the registry.
class Registry {
 public:
  // Makes devices of a family; `index` is the first free device number of
  // that family (sim0, sim1, ...), `options` the text after "family:".
  using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>(
      int index, absl::string_view options)>;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry that backends register with.
  static Registry& Global();

  // Takes ownership. AlreadyExists if a device of that name is registered.
  absl::Status RegisterDevice(std::unique_ptr<Device> device);
  // AlreadyExists if the family name is taken.
  absl::Status RegisterFamily(std::string family, DeviceFactory factory);

  // Creates and registers the next device of `family` ("sim" -> sim0, then
  // sim1...) from `options`, and returns it.
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
  absl::StatusOr<std::unique_ptr<Backend>> CreateBestBackend() const;

 private:
  struct Family {
    std::string name;
    DeviceFactory factory;
    int next_index = 0;
  };

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Device>> devices_ ABSL_GUARDED_BY(mu_);
  std::vector<Family> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_REGISTRY_H_
