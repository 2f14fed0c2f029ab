#include "ferry/engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ferry::engine {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: temperature ", temperature, " must be finite and >= 0"));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_k ", top_k, " must be >= 0"));
  }
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p ", top_p, " must be in (0, 1]"));
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(absl::Span<const float> logits) {
  if (params_.temperature <= 0) {
    // Greedy: one pass, no candidate list (a vocabulary of logits per
    // sequence per step). The first of equal maxima, as below.
    int32_t best = 0;
    float best_logit = 0;
    bool found = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      const float x = logits[i];
      if (std::isfinite(x) && (!found || x > best_logit)) {
        best = static_cast<int32_t>(i);
        best_logit = x;
        found = true;
      }
    }
    return best;
  }
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) {
      candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
    }
  }
  if (candidates_.empty()) return 0;
  // Larger logit first; among equals the lower id (deterministic).
  auto better = [](const std::pair<float, int32_t>& a,
                   const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0)
    keep = std::min(keep, static_cast<size_t>(params_.top_k));
  // Sorting the kept prefix is enough: top-p walks it in order.
  std::partial_sort(candidates_.begin(), candidates_.begin() + keep,
                    candidates_.end(), better);
  candidates_.resize(keep);
  const double max = candidates_[0].first;
  std::vector<double> probs(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((candidates_[i].first - max) / params_.temperature);
    sum += probs[i];
  }
  if (params_.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += probs[n++] / sum;
      if (mass >= params_.top_p) break;
    }
    keep = n;
    sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += probs[i];
  }
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

int64_t CountNonFinite(absl::Span<const float> values) {
  int64_t n = 0;
  for (float v : values) n += std::isfinite(v) ? 0 : 1;
  return n;
}

}  // namespace ferry::engine
