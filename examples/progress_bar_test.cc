#include "ferry/examples/progress_bar.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

using ::testing::HasSubstr;

TEST(ProgressBarTest, LineFillsInProportion) {
  EXPECT_EQ(ProgressBar::Line("run", 5, 10, 10),
            "\r  run                [#####.....] 5/10 tokens");
  EXPECT_EQ(ProgressBar::Line("run", 0, 10, 4),
            "\r  run                [....] 0/10 tokens");
}

TEST(ProgressBarTest, LineClampsCountsOutOfRange) {
  // More tokens than announced (or a zero total) must not overflow the bar.
  EXPECT_EQ(ProgressBar::Line("x", 12, 10, 4),
            "\r  x                  [####] 10/10 tokens");
  EXPECT_EQ(ProgressBar::Line("x", 3, 0, 4),
            "\r  x                  [....] 0/0 tokens");
  EXPECT_EQ(ProgressBar::Line("x", -1, 4, 4),
            "\r  x                  [....] 0/4 tokens");
}

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(ProgressBarTest, DrawsOnceDueAndErasesItsLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("drawn", 4,
                    {.out = f,
                     .only_on_terminal = false,
                     .delay = std::chrono::milliseconds(0),
                     .period = std::chrono::milliseconds(1)});
    bar.Add(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string text = ReadAll(f);
  EXPECT_THAT(text, HasSubstr("3/4 tokens"));
  EXPECT_THAT(text, HasSubstr(std::string("\r") + std::string(78, ' ') + "\r"));
  std::fclose(f);
}

TEST(ProgressBarTest, SilentBeforeItsDelayAndOffATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar early("early", 4,
                      {.out = f,
                       .only_on_terminal = false,
                       .delay = std::chrono::hours(1),
                       .period = std::chrono::milliseconds(1)});
    ProgressBar file("file", 4,
                     {.out = f,
                      .delay = std::chrono::milliseconds(0),
                      .period = std::chrono::milliseconds(1)});
    early.Add(1);
    file.Add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(ReadAll(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace ferry::examples
