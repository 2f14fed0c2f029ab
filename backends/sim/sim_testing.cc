#include "ferry/backends/sim/sim_testing.h"

#include "ferry/runtime/status_macros.h"

namespace ferry {

SimGate::SimGate(SimDevice& device)
    : semaphore_(std::make_shared<TimelineSemaphore>(0)) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = device.CreateBackend();
  FERRY_CHECK(backend.ok());
  backend_ = *std::move(backend);
  FERRY_CHECK(backend_->EnqueueWait(Event(semaphore_, 1)).ok());
  event_ = backend_->Record();
}

SimGate::~SimGate() { Open(); }

void SimGate::Open() {
  if (semaphore_->Value() < 1) FERRY_CHECK(semaphore_->Signal(1).ok());
}

}  // namespace ferry
