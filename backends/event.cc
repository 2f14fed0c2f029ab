#include "ferry/backends/event.h"

namespace ferry {
namespace {

const std::shared_ptr<TimelineSemaphore>& CompletedTimeline() {
  static const auto* const timeline = new std::shared_ptr<TimelineSemaphore>(
      std::make_shared<TimelineSemaphore>(1));
  return *timeline;
}

}  // namespace

Event::Event() : timeline_(CompletedTimeline()), value_(1) {}

}  // namespace ferry
