// The fake CUDA runtime's kernels: which __global__ functions the program
// registered with CUDA (nvcc's generated code calls __cudaRegisterFunction
// for each at static initialization, with the host address of the kernel's
// launch stub and its device symbol) and their host emulations.
//
// nvcc gives each translation unit its own launch stub for a kernel
// template instantiation (-static-global-template-stub is the default), so
// the unit that registers an emulation and the unit that launches the
// kernel may hold different host addresses for it. Both register the same
// device symbol, so an emulation is found through the symbol.
#ifndef FERRY_BACKENDS_CUDA_TESTING_INTERNAL_KERNEL_REGISTRY_H_
#define FERRY_BACKENDS_CUDA_TESTING_INTERNAL_KERNEL_REGISTRY_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "ferry/backends/cuda/testing/fake_cuda_control.h"

namespace ferry::fake_cuda_internal {

// Thread-safe. Usable during static initialization.
class KernelRegistry {
 public:
  static KernelRegistry& Get();

  // `host` is a kernel's launch stub; `symbol` its device symbol.
  void AddFunction(const void* host, const char* symbol);
  void AddEmulator(const void* host, fake_cuda::KernelEmulator emulator);
  // The emulator for a launch of `host`: NotFound naming the kernel if it
  // has none, InvalidArgument if `host` is no registered kernel.
  absl::StatusOr<fake_cuda::KernelEmulator> Find(const void* host) const;
  // The device symbol of `host`, or "" if unknown.
  std::string Symbol(const void* host) const;
  std::vector<std::string> WithoutEmulator() const;

 private:
  mutable std::mutex mu_;
  std::map<const void*, std::string> symbols_ ABSL_GUARDED_BY(mu_);
  // Emulators by the host address they were registered with; resolved to
  // symbols at lookup (registration order across units is unknown).
  std::map<const void*, fake_cuda::KernelEmulator> emulators_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ferry::fake_cuda_internal

#endif  // FERRY_BACKENDS_CUDA_TESTING_INTERNAL_KERNEL_REGISTRY_H_
