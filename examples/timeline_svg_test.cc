#include "ferry/examples/timeline_svg.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Fill(const std::string& svg, const std::string& title) {
  const size_t at = svg.find("<title>" + title);
  if (at == std::string::npos) return "";
  const size_t fill = svg.rfind("fill=\"", at);
  return svg.substr(fill + 6, 7);
}

TEST(TimelineSvgTest, HasAxisLegendAndCategoryColours) {
  const std::vector<std::string> tracks = {"sim0/compute", "sched/enqueue",
                                           "sim0/h2d"};
  const int64_t base = 7'000'000'000'000;  // Hours of uptime: no effect.
  std::vector<TraceSpan> spans = {
      {0, "mul_mat blk.0.attn_q", base, base + 2'000'000},
      {0, "add", base + 2'000'000, base + 2'500'000},
      {0, "rms_norm", base + 2'500'000, base + 3'000'000},
      {1, "split 0 sim0", base, base + 100'000},
      {2, "", base + 100'000, base + 900'000},
  };
  const std::string svg = RenderTimelineSvg(spans, tracks);
  // A time axis with round labels, and a legend.
  EXPECT_THAT(svg, HasSubstr(">0 ns</text>"));
  EXPECT_THAT(svg, HasSubstr(">1 ms</text>"));
  EXPECT_THAT(svg, HasSubstr(">mul_mat</text>"));
  EXPECT_THAT(svg, HasSubstr(">host work (enqueue)</text>"));
  // mul_mat and add look different; add and rms_norm are one category.
  EXPECT_NE(Fill(svg, "mul_mat blk.0.attn_q"), Fill(svg, "add"));
  EXPECT_EQ(Fill(svg, "add"), Fill(svg, "rms_norm"));
  // Host work is marked as such and is not drawn as device work.
  EXPECT_THAT(svg, HasSubstr("sched/enqueue (host)"));
  EXPECT_NE(Fill(svg, "split 0 sim0"), Fill(svg, "mul_mat blk.0.attn_q"));
  // No empty names.
  EXPECT_THAT(svg, HasSubstr("<title>(unnamed)"));
  EXPECT_THAT(svg, Not(HasSubstr("<title> ")));
  EXPECT_THAT(svg, HasSubstr("3 ms, 5 spans"));
}

}  // namespace
}  // namespace ferry::examples
