// Test helpers for the simulated device.
#ifndef FERRY_BACKENDS_SIM_SIM_TESTING_H_
#define FERRY_BACKENDS_SIM_SIM_TESTING_H_

#include <memory>

#include "ferry/backends/backend.h"
#include "ferry/backends/event.h"
#include "ferry/backends/sim/sim_device.h"
#include "ferry/runtime/timeline_semaphore.h"

namespace ferry {

// Holds work back until Open(): backends that Wait(gate.event()) before
// their work start no earlier than the gate opens, so everything can be
// enqueued first and the modelled times do not depend on how fast the host
// enqueues (an operation never starts, in the model, before the host
// submitted it). The event is a sim event, so its modelled time is exact
// for every waiter.
//
// While the gate is closed, an engine whose next operation waits for it is
// held, for every stream: open it before waiting on work queued behind it
// (synchronous buffer transfers included). Thread-compatible.
class SimGate {
 public:
  explicit SimGate(SimDevice& device);
  // Opens the gate if it is still closed.
  ~SimGate();
  SimGate(const SimGate&) = delete;
  SimGate& operator=(const SimGate&) = delete;

  const Event& event() const { return event_; }
  void Open();

 private:
  std::shared_ptr<TimelineSemaphore> semaphore_;
  std::unique_ptr<Backend> backend_;
  Event event_;
};

}  // namespace ferry

#endif  // FERRY_BACKENDS_SIM_SIM_TESTING_H_
