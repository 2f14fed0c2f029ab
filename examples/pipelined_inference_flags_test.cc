#include "ferry/examples/pipelined_inference_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ferry::examples {
namespace {

using ::ferry::testing::IsOk;
using ::ferry::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PipelinedInferenceFlagsTest, DefaultsAreValid) {
  absl::FlagSaver saver;
  EXPECT_THAT(ValidateFlags(), IsOk());
}

// A real model runs on the CPU unless --backends says otherwise; the demo's
// random weights on two simulated accelerators and the CPU.
TEST(PipelinedInferenceFlagsTest, BackendsDefaultToTheCpuForARealModel) {
  absl::FlagSaver saver;
  EXPECT_EQ(BackendsFromFlags(), "sim0,sim1,cpu");
  absl::SetFlag(&FLAGS_model, "m.gguf");
  EXPECT_EQ(BackendsFromFlags(), "cpu");
  absl::SetFlag(&FLAGS_model, "");
  absl::SetFlag(&FLAGS_weights, "w.safetensors");
  EXPECT_EQ(BackendsFromFlags(), "sim0,sim1,cpu");
  absl::SetFlag(&FLAGS_model, "m.gguf");
  absl::SetFlag(&FLAGS_backends, "sim0,cpu");
  EXPECT_EQ(BackendsFromFlags(), "sim0,cpu");
}

TEST(PipelinedInferenceFlagsTest, OutOfRangeNamesTheFlag) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_gen_tokens, -5);
  EXPECT_THAT(ValidateFlags(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--gen_tokens: -5 must be >= 1")));
  absl::SetFlag(&FLAGS_gen_tokens, 4);
  absl::SetFlag(&FLAGS_n_copies, 65);
  EXPECT_THAT(ValidateFlags(), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("--n_copies: at most 64")));
  absl::SetFlag(&FLAGS_n_copies, 0);
  absl::SetFlag(&FLAGS_workload, "burst");
  EXPECT_THAT(ValidateFlags(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--workload: 'burst' is not")));
}

TEST(PipelinedInferenceFlagsTest, SplitIsFiniteAndNonNegative) {
  FERRY_ASSERT_OK_AND_ASSIGN(std::vector<double> split, ParseSplit("1,0.5,0"));
  EXPECT_THAT(split, ElementsAre(1, 0.5, 0));
  for (const char* bad : {"nan,1", "1,-1", "inf", "1,x"}) {
    EXPECT_THAT(ParseSplit(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("--split: '")))
        << bad;
  }
}

TEST(PipelinedInferenceFlagsTest, SplitByIsLayersOrWeights) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_split, "3,2,0");
  absl::SetFlag(&FLAGS_split_by, "weights");
  FERRY_ASSERT_OK_AND_ASSIGN(llama::LlamaModelOptions options,
                             ModelOptionsFromFlags());
  EXPECT_EQ(options.split_unit, llama::SplitUnit::kWeightBytes);
  EXPECT_THAT(options.split, ElementsAre(3, 2, 0));
  absl::SetFlag(&FLAGS_split_by, "bytes");
  EXPECT_THAT(ModelOptionsFromFlags(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--split_by: 'bytes' is neither")));
}

TEST(PipelinedInferenceFlagsTest, CheckWritableNamesTheMissingDirectory) {
  const std::string dir = absl::StrCat(
      std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp");
  EXPECT_THAT(CheckWritable("trace", ""), IsOk());
  EXPECT_THAT(CheckWritable("trace", absl::StrCat(dir, "/t.json")), IsOk());
  EXPECT_THAT(CheckWritable("trace", absl::StrCat(dir, "/no/such/t.json")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(absl::StrCat("directory '", dir,
                                              "/no/such' does not exist"))));
  // Not a missing directory: the system's reason.
  EXPECT_THAT(
      CheckWritable("output", dir),
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr(absl::StrCat("--output=", dir,
                                      ": cannot write: Is a directory"))));
}

TEST(PipelinedInferenceFlagsTest, EngineFlagsOverrideOnlyWhenSet) {
  absl::FlagSaver saver;
  engine::EngineOptions options;
  options.max_sequence_len = 100;
  options.batch_window = 128;
  options.n_copies = 3;
  ApplyEngineFlags(/*n_ctx=*/512, options);
  EXPECT_EQ(options.max_sequence_len, 100);
  EXPECT_EQ(options.batch_window, 128);
  EXPECT_EQ(options.n_copies, 3);

  absl::SetFlag(&FLAGS_max_seq_len, 1000);  // Capped at the context.
  absl::SetFlag(&FLAGS_n_copies, 5);
  ApplyEngineFlags(/*n_ctx=*/512, options);
  EXPECT_EQ(options.max_sequence_len, 512);
  EXPECT_EQ(options.batch_window, 513);  // Holds a whole sequence.
  EXPECT_EQ(options.n_copies, 5);
}

}  // namespace
}  // namespace ferry::examples
