#include "ferry/backends/device.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ferry {

absl::string_view DeviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kGpu:
      return "gpu";
    case DeviceType::kIGpu:
      return "igpu";
    case DeviceType::kAccel:
      return "accel";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Buffer>> Device::BufferFromHostPointer(
    void* /*data*/, size_t /*size*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " cannot use host memory in place"));
}

bool Device::OffloadOp(const Tensor& /*node*/) const { return false; }

int64_t Device::ClockNanos() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

EventWaitMode Device::WaitMode(const Event& event) const {
  return event.device() == this || event.IsComplete() ? EventWaitMode::kDevice
                                                      : EventWaitMode::kHost;
}

}  // namespace ferry
