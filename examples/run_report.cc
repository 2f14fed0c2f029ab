#include "ferry/examples/run_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ferry::examples {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i =
      static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string FormatBytes(double b) {
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (b >= 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  return absl::StrFormat("%.0f B", b);
}

void PrintReport(std::FILE* out, const std::vector<RunResult>& runs,
                 bool modelled) {
  const char* clock = modelled ? "modelled" : "wall";
  std::fprintf(out, "%-34s", "");
  for (const RunResult& r : runs)
    std::fprintf(out, "%20s", r.config.label.c_str());
  std::fprintf(out, "\n");
  auto row = [&](const char* name, auto value) {
    std::fprintf(out, "  %-32s", name);
    for (const RunResult& r : runs) {
      std::fprintf(out, "%20s", value(r).c_str());
    }
    std::fprintf(out, "\n");
  };
  row(absl::StrCat("time (", clock, ")").c_str(),
      [](const RunResult& r) { return absl::StrFormat("%.3f s", r.seconds); });
  row("generated tokens/s", [](const RunResult& r) {
    return absl::StrFormat("%.1f", r.generated / r.seconds);
  });
  row("all tokens/s (prompt + new)", [](const RunResult& r) {
    return absl::StrFormat("%.1f", (r.generated + r.prompt) / r.seconds);
  });
  row("time to first token p50/p99", [](const RunResult& r) {
    return absl::StrFormat("%.1f/%.1f ms", Quantile(r.ttft_ms, 0.5),
                           Quantile(r.ttft_ms, 0.99));
  });
  row("inter-token latency p50/p99", [](const RunResult& r) {
    return absl::StrFormat("%.1f/%.1f ms", Quantile(r.itl_ms, 0.5),
                           Quantile(r.itl_ms, 0.99));
  });
  row("micro-batches (mean fill)", [](const RunResult& r) {
    const int64_t used = r.stats.prefill_tokens + r.stats.decode_tokens;
    return absl::StrFormat(
        "%lld (%.0f%%)", static_cast<long long>(r.stats.micro_batches),
        100.0 * used / std::max<int64_t>(1, used + r.stats.padded_tokens));
  });
  row("most in flight",
      [](const RunResult& r) { return absl::StrCat(r.stats.max_in_flight); });
  row("bytes copied", [](const RunResult& r) {
    return FormatBytes(static_cast<double>(r.bytes_copied));
  });
  if (modelled) {
    row("slowest-stage bound, tokens/s", [](const RunResult& r) {
      return absl::StrFormat("%.1f",
                             r.generated / (r.slowest_compute_ns / 1e9));
    });
    row("share of the bound reached", [](const RunResult& r) {
      return absl::StrFormat("%.2f", r.slowest_compute_ns / 1e9 / r.seconds);
    });
  }
  std::fprintf(out, "  engine busy (share of the run):\n");
  for (size_t e = 0; e < runs[0].busy.size(); ++e) {
    bool any = false;
    for (const RunResult& r : runs) any |= r.busy[e].second > 0.0005;
    if (!any) continue;
    std::fprintf(out, "    %-30s", runs[0].busy[e].first.c_str());
    for (const RunResult& r : runs) {
      std::fprintf(out, "%19.1f%%", 100 * r.busy[e].second);
    }
    std::fprintf(out, "\n");
  }
  row("overlap (engines busy at once)", [](const RunResult& r) {
    double sum = 0;
    for (const auto& b : r.busy) sum += b.second;
    return absl::StrFormat("%.2f", sum);
  });
  if (runs.size() > 1) {
    std::fprintf(out, "  speedup of %s over %s: %.2fx (%s)\n",
                 runs[1].config.label.c_str(), runs[0].config.label.c_str(),
                 runs[0].seconds / runs[1].seconds, clock);
  }
  for (size_t i = 2; i < runs.size(); ++i) {
    std::fprintf(
        out, "  %s vs %s: %.2fx the throughput, TTFT p50 %.1f vs %.1f ms\n",
        runs[1].config.label.c_str(), runs[i].config.label.c_str(),
        runs[i].seconds / runs[1].seconds, Quantile(runs[1].ttft_ms, 0.5),
        Quantile(runs[i].ttft_ms, 0.5));
  }
}

std::string CompareRuns(const std::vector<RunResult>& runs, int* problems) {
  std::string out;
  const RunResult& base = runs.back();
  for (size_t i = 0; i + 1 < runs.size(); ++i) {
    int differ = 0;
    double max_diff = 0;
    int64_t nan_mismatch = 0;
    for (size_t k = 0; k < base.results.size(); ++k) {
      const engine::Result& a = runs[i].results[k];
      const engine::Result& b = base.results[k];
      differ += a.tokens != b.tokens;
      for (size_t j = 0; j < a.logits.size() && j < b.logits.size(); ++j) {
        for (size_t v = 0; v < a.logits[j].second.size(); ++v) {
          const float x = a.logits[j].second[v], y = b.logits[j].second[v];
          if (std::isnan(x) != std::isnan(y) || (std::isinf(x) && x != y)) {
            ++nan_mismatch;
          } else if (std::isfinite(x)) {
            max_diff = std::max(max_diff, std::fabs(double{x} - y));
          }
        }
      }
    }
    absl::StrAppendFormat(&out,
                          "  check: %s vs %s: %d of %zu requests' tokens "
                          "differ; logits max |diff| %g, NaN/Inf mismatches "
                          "%lld\n",
                          runs[i].config.label, base.config.label, differ,
                          base.results.size(), max_diff,
                          static_cast<long long>(nan_mismatch));
    *problems += differ + (nan_mismatch > 0);
  }
  for (const RunResult& r : runs) {
    if (r.non_finite == 0) continue;
    int reqs = 0;
    for (const auto& res : r.results) reqs += res.non_finite_logits > 0;
    absl::StrAppendFormat(&out,
                          "  WARNING: %s: %lld NaN/Inf logits in %d "
                          "requests (their tokens are meaningless)\n",
                          r.config.label, static_cast<long long>(r.non_finite),
                          reqs);
    ++*problems;
  }
  return out;
}

}  // namespace ferry::examples
