#include "ferry/engine/testing/smollm2_reference.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ferry::engine::testing {
namespace {

Reference ParseReference(const nlohmann::json& p, const std::string& prefix) {
  Reference r;
  for (const auto& row : p.at(prefix + "top")) {
    r.top_ids.push_back(row.at("ids").get<std::vector<int32_t>>());
    r.top_logits.push_back(row.at("logits").get<std::vector<float>>());
  }
  r.greedy = p.at(prefix + "greedy").get<std::vector<int32_t>>();
  r.greedy_margin = p.at(prefix + "greedy_margin").get<std::vector<float>>();
  return r;
}

}  // namespace

absl::StatusOr<std::vector<ReferencePrompt>> LoadReference(
    const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("no ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("prompts")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a reference"));
  }
  std::vector<ReferencePrompt> out;
  for (const auto& p : j.at("prompts")) {
    ReferencePrompt r;
    r.text = p.at("text").get<std::string>();
    r.tokens = p.at("tokens").get<std::vector<int32_t>>();
    r.llama_cpp = ParseReference(p, "");
    r.exact = ParseReference(p, "exact_");
    out.push_back(std::move(r));
  }
  return out;
}

void TruncateGreedy(std::vector<ReferencePrompt>& prompts, size_t steps) {
  for (ReferencePrompt& r : prompts) {
    for (Reference* ref : {&r.exact, &r.llama_cpp}) {
      if (ref->greedy.size() > steps) {
        ref->greedy.resize(steps);
        ref->greedy_margin.resize(steps);
      }
    }
  }
}

std::string Compare(const Reference& ref, const Result& res,
                    const Bounds& bounds, Agreement& a,
                    const Reference* second) {
  // The second reference's margin at prompt position p / greedy step s,
  // where its context is ref's (+inf: no second opinion).
  const auto second_top_margin = [&](size_t p) {
    if (second == nullptr || p >= second->top_logits.size()) return INFINITY;
    return second->top_logits[p][0] - second->top_logits[p][1];
  };
  const auto second_step_margin = [&](size_t s) {
    if (second == nullptr || s >= second->greedy.size() ||
        !std::equal(ref.greedy.begin(), ref.greedy.begin() + s,
                    second->greedy.begin())) {
      return INFINITY;
    }
    return second->greedy_margin[s];
  };
  double err = 0;
  for (size_t p = 0; p < ref.top_ids.size(); ++p) {
    const std::vector<float>& row = res.logits[p].second;
    for (size_t i = 0; i < ref.top_ids[p].size(); ++i) {
      const double d = std::fabs(row[ref.top_ids[p][i]] - ref.top_logits[p][i]);
      err = std::isnan(d) ? INFINITY : std::max(err, d);  // NaN fails.
    }
    const int32_t argmax = static_cast<int32_t>(
        std::max_element(row.begin(), row.end()) - row.begin());
    const bool same = argmax == ref.top_ids[p][0];
    a.top1 += same;
    a.top1_bad +=
        !same &&
        ref.top_logits[p][0] - ref.top_logits[p][1] >= bounds.tie_margin &&
        second_top_margin(p) >= bounds.tie_margin;
    ++a.rows;
  }
  a.max_err = std::max(a.max_err, err);
  size_t first_diff = 0;
  while (first_diff < ref.greedy.size() && first_diff < res.tokens.size() &&
         res.tokens[first_diff] == ref.greedy[first_diff]) {
    ++first_diff;
  }
  std::string verdict = "equal";
  if (first_diff == ref.greedy.size() && res.tokens.size() == first_diff) {
    ++a.greedy_equal;
  } else if (first_diff < ref.greedy.size() &&
             ref.greedy_margin[first_diff] < bounds.tie_margin) {
    verdict = absl::StrFormat("leaves at step %d, a near-tie (margin %.3f)",
                              first_diff, ref.greedy_margin[first_diff]);
  } else if (first_diff < ref.greedy.size() &&
             second_step_margin(first_diff) < bounds.tie_margin) {
    verdict = absl::StrFormat(
        "leaves at step %d, a near-tie of the other reference (margin %.3f; "
        "this one's %.3f)",
        first_diff, second_step_margin(first_diff),
        ref.greedy_margin[first_diff]);
  } else {
    ++a.greedy_bad;
    verdict = absl::StrFormat("DIFFERS at step %d", first_diff);
  }
  return absl::StrFormat("max |err| %.2e, greedy %s", err, verdict);
}

}  // namespace ferry::engine::testing
