#include "ferry/sched/lane_streams.h"

#include <memory>
#include <vector>

#include "ferry/backends/testing/fake_device.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

using ::ferry::testing::FakeDevice;
using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::HasSubstr;

// Two lanes on one device: the second computes on a stream of its own.
class LaneStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = FakeDevice::Create("fake0");
    FERRY_ASSERT_OK_AND_ASSIGN(backend_, device_->CreateBackend());
    partition_.lanes = {{.backend = 0, .index = 0}, {.backend = 0, .index = 1}};
  }

  absl::Status Make() {
    return streams_.Make(partition_, {backend_.get()},
                         {device_->default_buffer_type()}, /*cpu=*/-1);
  }

  std::unique_ptr<FakeDevice> device_;
  std::unique_ptr<Backend> backend_;
  Partition partition_;
  LaneStreams streams_;
};

TEST_F(LaneStreamsTest, ALaterLaneGetsAStreamOfItsOwn) {
  ASSERT_THAT(Make(), IsOk());
  EXPECT_EQ(&streams_.compute(0), backend_.get());
  EXPECT_NE(&streams_.compute(1), backend_.get());
  EXPECT_EQ(streams_.types().size(), 2u);
}

// A device that went away (a remote worker killed mid-run) fails the plan
// with its own reason, and the device's name.
TEST_F(LaneStreamsTest, AStreamThatCannotBeMadeSaysWhy) {
  device_->FailNextCreateBackend(
      absl::UnavailableError("remote worker 127.0.0.1:9: connection lost"));
  EXPECT_THAT(Make(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("cannot make a second stream for a later "
                                 "stage: remote worker 127.0.0.1:9: "
                                 "connection lost")));
  // The next plan makes it.
  EXPECT_THAT(Make(), IsOk());
}

}  // namespace
}  // namespace ferry
