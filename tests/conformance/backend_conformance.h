// The backend conformance suite: tests written once that every backend runs
// (IREE's CTS, PJRT's client tests). A backend joins by registering a
// BackendFactory in its own test binary:
//
//   INSTANTIATE_TEST_SUITE_P(Cpu, BackendConformanceTest,
//       ::testing::Values(BackendFactory{"cpu", MakeCpu}), FactoryName);
//
// A factory that answers Unavailable (e.g. no GPU) makes every test skip,
// visibly, with the reason.
#ifndef FERRY_TESTS_CONFORMANCE_BACKEND_CONFORMANCE_H_
#define FERRY_TESTS_CONFORMANCE_BACKEND_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ferry/backends/backend.h"
#include "gtest/gtest.h"

namespace ferry::testing {

struct BackendFactory {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> create;
};

inline std::string FactoryName(
    const ::testing::TestParamInfo<BackendFactory>& info) {
  return info.param.name;
}

class BackendConformanceTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;

  std::unique_ptr<Backend> backend_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_CONFORMANCE_BACKEND_CONFORMANCE_H_
