#include "ferry/backends/cuda/testing/internal/kernel_registry.h"

#include <cstdlib>
#include <memory>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ferry::fake_cuda_internal {

KernelRegistry& KernelRegistry::Get() {
  static KernelRegistry* const registry = new KernelRegistry();
  return *registry;
}

void KernelRegistry::AddFunction(const void* host, const char* symbol) {
  std::lock_guard<std::mutex> lock(mu_);
  symbols_[host] = symbol != nullptr ? symbol : "";
}

void KernelRegistry::AddEmulator(const void* host,
                                 fake_cuda::KernelEmulator emulator) {
  std::lock_guard<std::mutex> lock(mu_);
  emulators_[host] = emulator;
}

absl::StatusOr<fake_cuda::KernelEmulator> KernelRegistry::Find(
    const void* host) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = emulators_.find(host); it != emulators_.end()) {
    return it->second;
  }
  auto symbol = symbols_.find(host);
  if (symbol == symbols_.end()) {
    return absl::InvalidArgumentError(
        "fake CUDA: launch of a function that is no registered kernel");
  }
  for (const auto& [emulated_host, emulator] : emulators_) {
    auto it = symbols_.find(emulated_host);
    if (it != symbols_.end() && it->second == symbol->second) return emulator;
  }
  return absl::NotFoundError(
      absl::StrCat("fake CUDA: kernel ", symbol->second,
                   " has no host emulation (RegisterKernelEmulator)"));
}

std::string KernelRegistry::Symbol(const void* host) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = symbols_.find(host);
  return it == symbols_.end() ? "" : it->second;
}

std::vector<std::string> KernelRegistry::WithoutEmulator() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> emulated;
  for (const auto& [host, emulator] : emulators_) {
    auto it = symbols_.find(host);
    if (it != symbols_.end()) emulated.insert(it->second);
  }
  std::set<std::string> missing;
  for (const auto& [host, symbol] : symbols_) {
    if (!emulated.contains(symbol)) missing.insert(symbol);
  }
  return std::vector<std::string>(missing.begin(), missing.end());
}

}  // namespace ferry::fake_cuda_internal
