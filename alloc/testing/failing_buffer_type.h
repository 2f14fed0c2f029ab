// A host buffer type whose allocations fail on demand, for error-path tests.
#ifndef FERRY_ALLOC_TESTING_FAILING_BUFFER_TYPE_H_
#define FERRY_ALLOC_TESTING_FAILING_BUFFER_TYPE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "ferry/backends/host_buffer.h"

namespace ferry::testing {

// Allocates like HostBufferType until `fail_after` allocations succeeded,
// then returns ResourceExhaustedError. Counts live buffers it made.
// Thread-compatible.
class FailingBufferType : public HostBufferType {
 public:
  FailingBufferType(size_t alignment, size_t max_size, int fail_after)
      : HostBufferType("failing", alignment, nullptr, max_size),
        fail_after_(fail_after) {}

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
    if (made_ >= fail_after_) {
      return absl::ResourceExhaustedError("failing: out of memory");
    }
    ++made_;
    return HostBufferType::Allocate(size);
  }

  int made() const { return made_; }
  void set_fail_after(int n) { fail_after_ = n; }

 private:
  int fail_after_;
  int made_ = 0;
};

}  // namespace ferry::testing

#endif  // FERRY_ALLOC_TESTING_FAILING_BUFFER_TYPE_H_
