#include "ferry/examples/run_report.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RunReportTest, QuantileIsTheNearestRank) {
  EXPECT_EQ(Quantile({}, 0.5), 0);
  EXPECT_EQ(Quantile({3, 1, 2}, 0.5), 2);
  EXPECT_EQ(Quantile({3, 1, 2}, 0), 1);
  EXPECT_EQ(Quantile({3, 1, 2}, 0.99), 3);
  EXPECT_EQ(Quantile({5}, 1), 5);
}

TEST(RunReportTest, FormatBytesPicksTheUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
}

RunResult MakeRun(std::string label, std::vector<int32_t> tokens,
                  std::vector<float> logits) {
  RunResult r;
  r.config.label = std::move(label);
  r.seconds = 2;
  engine::Result res;
  res.id = "a";
  res.tokens = std::move(tokens);
  res.logits.emplace_back(0, std::move(logits));
  for (float x : res.logits[0].second)
    res.non_finite_logits += !std::isfinite(x);
  r.non_finite = res.non_finite_logits;
  r.results.push_back(std::move(res));
  r.generated = 10;
  r.busy = {{"sim0/compute", 0.5}, {"cpu/compute", 0}};
  return r;
}

TEST(RunReportTest, EqualRunsAgree) {
  int problems = 0;
  const std::string out = CompareRuns(
      {MakeRun("one", {1, 2}, {0.5f, 1}), MakeRun("two", {1, 2}, {0.5f, 1})},
      &problems);
  EXPECT_EQ(problems, 0);
  EXPECT_THAT(out, HasSubstr("one vs two: 0 of 1 requests' tokens differ; "
                             "logits max |diff| 0, NaN/Inf mismatches 0"));
  EXPECT_THAT(out, Not(HasSubstr("WARNING")));
}

TEST(RunReportTest, DifferentTokensAndLogitsAreCounted) {
  int problems = 0;
  const std::string out = CompareRuns(
      {MakeRun("one", {1, 3}, {0.25f, 1}), MakeRun("two", {1, 2}, {0.5f, 1})},
      &problems);
  EXPECT_EQ(problems, 1);
  EXPECT_THAT(out, HasSubstr("1 of 1 requests' tokens differ; logits max "
                             "|diff| 0.25"));
}

TEST(RunReportTest, NaNInOneRunOnlyIsAMismatchAndWarned) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int problems = 0;
  const std::string out = CompareRuns(
      {MakeRun("one", {1}, {nan, 1}), MakeRun("two", {1}, {0.5f, 1})},
      &problems);
  EXPECT_THAT(out, HasSubstr("NaN/Inf mismatches 1"));
  EXPECT_THAT(out, HasSubstr("WARNING: one: 1 NaN/Inf logits in 1 requests"));
  EXPECT_EQ(problems, 2);  // The mismatch and the warning.
}

TEST(RunReportTest, ReportHasAColumnPerRunAndTheSpeedup) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  std::vector<RunResult> runs = {MakeRun("one in flight", {1}, {0}),
                                 MakeRun("pipelined x4", {1}, {0})};
  runs[1].seconds = 1;
  PrintReport(f, runs, /*modelled=*/true);
  std::rewind(f);
  std::string text(1 << 14, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_THAT(text, HasSubstr("time (modelled)"));
  EXPECT_THAT(text, HasSubstr("pipelined x4"));
  EXPECT_THAT(text, HasSubstr("sim0/compute"));
  // An engine idle in every run gets no row.
  EXPECT_THAT(text, Not(HasSubstr("cpu/compute")));
  EXPECT_THAT(text, HasSubstr("speedup of pipelined x4 over one in flight: "
                              "2.00x (modelled)"));
}

}  // namespace
}  // namespace ferry::examples
