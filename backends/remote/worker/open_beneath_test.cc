#include "ferry/backends/remote/worker/open_beneath.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "ferry/runtime/status_matchers.h"
#include "gtest/gtest.h"

namespace ferry::remote {
namespace {

using ::ferry::testing::StatusIs;

class OpenBeneathTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    root_ = std::string(std::getenv("TEST_TMPDIR")) + "/open_beneath";
    mkdir(root_.c_str(), 0700);
    dir_ = root_ + "/weights";
    mkdir(dir_.c_str(), 0700);
    mkdir((dir_ + "/sub").c_str(), 0700);
    std::ofstream(dir_ + "/sub/w.bin") << "weights";
    std::ofstream(root_ + "/secret") << "secret";
    symlink((root_ + "/secret").c_str(), (dir_ + "/link").c_str());
    symlink("sub", (dir_ + "/sublink").c_str());
    mkfifo((dir_ + "/fifo").c_str(), 0600);
  }
  absl::StatusOr<int> Open(const std::string& relative) {
    return GetParam() ? OpenBeneathByComponents(dir_, relative)
                      : OpenBeneath(dir_, relative);
  }
  std::string root_, dir_;
};

TEST_P(OpenBeneathTest, OpensARegularFileBeneath) {
  FERRY_ASSERT_OK_AND_ASSIGN(int fd, Open("sub/w.bin"));
  char buf[8] = {};
  EXPECT_EQ(read(fd, buf, sizeof(buf)), 7);
  EXPECT_EQ(std::string(buf), "weights");
  close(fd);
}

TEST_P(OpenBeneathTest, RefusesLinksParentsAndOddFiles) {
  EXPECT_THAT(Open("link"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Open("sublink/w.bin"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Open("../secret"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Open(root_ + "/secret"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Open("sub/./w.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Open("missing"), StatusIs(absl::StatusCode::kNotFound));
  // A FIFO would block a reader forever: refused at once.
  EXPECT_THAT(Open("fifo"), StatusIs(absl::StatusCode::kInvalidArgument,
                                     ::testing::HasSubstr("regular")));
  EXPECT_THAT(Open("sub"), StatusIs(absl::StatusCode::kInvalidArgument));
}

INSTANTIATE_TEST_SUITE_P(Openat2AndFallback, OpenBeneathTest,
                         ::testing::Bool());

}  // namespace
}  // namespace ferry::remote
