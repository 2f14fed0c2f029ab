#include "ferry/backends/sim/sim_config.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ferry {
namespace {

constexpr absl::string_view kKeys =
    "mem, max_alloc, flops, bw, h2d, d2h, d2d, pageable, lat, launch, scale, "
    "guard, ops, fail_alloc, fail_copy, fail_kernel";

absl::Status Error(absl::string_view item, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("sim config '", item, "': ", what));
}

// Splits "12.5GB/s" into 12.5 and "GB/s". False if there is no number.
bool SplitNumber(absl::string_view text, double* value,
                 absl::string_view* suffix) {
  size_t i = 0;
  bool digits = false;
  while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.')) {
    digits |= absl::ascii_isdigit(text[i]);
    ++i;
  }
  if (!digits) return false;
  // An exponent: e or E, an optional sign, digits.
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    if (j < text.size() && absl::ascii_isdigit(text[j])) {
      while (j < text.size() && absl::ascii_isdigit(text[j])) ++j;
      i = j;
    }
  }
  if (!absl::SimpleAtod(text.substr(0, i), value) || !std::isfinite(*value)) {
    return false;
  }
  *suffix = text.substr(i);
  return true;
}

// Multiplier of a byte-size suffix ("", B, KB..TB, KiB..TiB), or 0.
double SizeUnit(absl::string_view suffix) {
  static const std::pair<absl::string_view, double> kUnits[] = {
      {"", 1},         {"b", 1},        {"kb", 1e3},     {"mb", 1e6},
      {"gb", 1e9},     {"tb", 1e12},    {"kib", 0x1p10}, {"mib", 0x1p20},
      {"gib", 0x1p30}, {"tib", 0x1p40},
  };
  const std::string lower = absl::AsciiStrToLower(suffix);
  for (const auto& [name, scale] : kUnits) {
    if (lower == name) return scale;
  }
  return 0;
}

absl::Status ParseSize(absl::string_view item, absl::string_view text,
                       uint64_t* out) {
  double value;
  absl::string_view suffix;
  const double unit = SplitNumber(text, &value, &suffix) ? SizeUnit(suffix) : 0;
  if (unit == 0) {
    return Error(item,
                 "expected a size like 8GiB or 512MB (B, KB, MB, GB, TB, "
                 "KiB, MiB, GiB, TiB)");
  }
  const double bytes = value * unit;
  if (bytes < 1 || bytes >= 0x1p63) {
    return Error(item, "the size must be at least 1 byte and below 8 EiB");
  }
  *out = static_cast<uint64_t>(std::llround(bytes));
  return absl::OkStatus();
}

absl::Status ParseRate(absl::string_view item, absl::string_view text,
                       double* out) {
  double value;
  absl::string_view suffix;
  double unit = 0;
  if (SplitNumber(text, &value, &suffix) &&
      absl::ConsumeSuffix(&suffix, "/s")) {
    unit = suffix.empty() ? 0 : SizeUnit(suffix);
  }
  if (unit == 0) {
    return Error(item,
                 "expected a rate like 25GB/s (B/s, KB/s .. TB/s, "
                 "KiB/s .. TiB/s)");
  }
  if (value <= 0) return Error(item, "the rate must be positive");
  *out = value * unit;
  return absl::OkStatus();
}

absl::Status ParseFlops(absl::string_view item, absl::string_view text,
                        double* out) {
  static const std::pair<absl::string_view, double> kUnits[] = {
      {"", 1},    {"k", 1e3},  {"K", 1e3},  {"M", 1e6},
      {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
  };
  double value;
  absl::string_view suffix;
  if (SplitNumber(text, &value, &suffix)) {
    for (const auto& [name, scale] : kUnits) {
      if (suffix == name) {
        if (value <= 0) return Error(item, "FLOP/s must be positive");
        *out = value * scale;
        return absl::OkStatus();
      }
    }
  }
  return Error(item, "expected a number with an optional k/M/G/T suffix");
}

absl::Status ParseDuration(absl::string_view item, absl::string_view text,
                           int64_t* out) {
  static const std::pair<absl::string_view, double> kUnits[] = {
      {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  double value;
  absl::string_view suffix;
  if (SplitNumber(text, &value, &suffix)) {
    if (suffix.empty() && value == 0) {
      *out = 0;
      return absl::OkStatus();
    }
    for (const auto& [name, scale] : kUnits) {
      if (suffix == name) {
        const double ns = value * scale;
        if (ns >= 0x1p62) return Error(item, "the duration is too long");
        *out = static_cast<int64_t>(std::llround(ns));
        return absl::OkStatus();
      }
    }
  }
  return Error(item, "expected a duration like 10us (ns, us, ms, s)");
}

absl::Status ParseCount(absl::string_view item, absl::string_view text,
                        int64_t* out) {
  if (!absl::SimpleAtoi(text, out) || *out < 0) {
    return Error(item, "expected a count k >= 0 (0: no fault)");
  }
  return absl::OkStatus();
}

absl::Status ParseOps(absl::string_view item,
                      const std::vector<absl::string_view>& names,
                      std::bitset<kNumOps>* out) {
  if (names.empty()) return Error(item, "expected op names");
  const bool remove = absl::StartsWith(names[0], "-");
  std::bitset<kNumOps> ops;
  if (remove) ops.set();
  for (absl::string_view name : names) {
    if (absl::StartsWith(name, "-") != remove) {
      return Error(item,
                   "either remove ops (ops=-a,-b) or list the only ops to "
                   "allow (ops=a,b), not both");
    }
    if (remove) name.remove_prefix(1);
    int found = -1;
    for (int i = 1; i < kNumOps; ++i) {
      if (OpName(static_cast<Op>(i)) == name) found = i;
    }
    if (found < 0) {
      std::vector<absl::string_view> known;
      for (int i = 1; i < kNumOps; ++i) known.push_back(OpName(Op(i)));
      return Error(item, absl::StrCat("unknown op '", name, "' (known: ",
                                      absl::StrJoin(known, ", "), ")"));
    }
    ops.set(static_cast<size_t>(found), !remove);
  }
  ops.set(static_cast<size_t>(Op::kNone));  // Leafs compute nothing.
  *out = ops;
  return absl::OkStatus();
}

std::string FormatRate(double bytes_per_s) {
  return absl::StrFormat("%.10gGB/s", bytes_per_s / 1e9);
}

}  // namespace

bool SimConfig::guarded() const {
  switch (guard) {
    case Guard::kOn:
      return true;
    case Guard::kOff:
      return false;
    case Guard::kDefault:
      break;
  }
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

std::string SimConfig::ToString() const {
  std::string text =
      absl::StrCat("mem=", mem_bytes, "B,max_alloc=", max_alloc(),
                   "B,flops=", absl::StrFormat("%.10gG", flops / 1e9),
                   ",bw=", FormatRate(mem_bw), ",h2d=", FormatRate(h2d_bw),
                   ",d2h=", FormatRate(d2h_bw), ",d2d=", FormatRate(d2d_bw));
  if (pageable_bw > 0)
    absl::StrAppend(&text, ",pageable=", FormatRate(pageable_bw));
  absl::StrAppend(&text, ",lat=", latency_ns, "ns,launch=", launch_ns,
                  "ns,scale=", absl::StrFormat("%.10g", time_scale));
  if (guard != Guard::kDefault) {
    absl::StrAppend(&text, ",guard=", guard == Guard::kOn ? "on" : "off");
  }
  if (faults.alloc > 0) absl::StrAppend(&text, ",fail_alloc=", faults.alloc);
  if (faults.copy > 0) absl::StrAppend(&text, ",fail_copy=", faults.copy);
  if (faults.kernel > 0) {
    absl::StrAppend(&text, ",fail_kernel=", faults.kernel);
  }
  if (!ops.all()) {
    // Ops is last: its list runs to the end of the string.
    std::vector<std::string> names;
    for (int i = 1; i < kNumOps; ++i) {
      if (!ops.test(static_cast<size_t>(i))) {
        names.push_back(absl::StrCat("-", OpName(static_cast<Op>(i))));
      }
    }
    absl::StrAppend(&text, ",ops=", absl::StrJoin(names, ","));
  }
  return text;
}

absl::StatusOr<SimConfig> ParseSimConfig(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  absl::ConsumePrefix(&text, "sim:");
  SimConfig config;
  std::vector<absl::string_view> items =
      absl::StrSplit(text, ',', absl::SkipWhitespace());
  for (size_t i = 0; i < items.size(); ++i) {
    const absl::string_view item = absl::StripAsciiWhitespace(items[i]);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return Error(item,
                   absl::StrCat("expected key=value (keys: ", kKeys, ")"));
    }
    const absl::string_view key =
        absl::StripAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value =
        absl::StripAsciiWhitespace(item.substr(eq + 1));
    absl::Status status;
    if (key == "mem") {
      status = ParseSize(item, value, &config.mem_bytes);
    } else if (key == "max_alloc") {
      status = ParseSize(item, value, &config.max_alloc_bytes);
    } else if (key == "flops") {
      status = ParseFlops(item, value, &config.flops);
    } else if (key == "bw") {
      status = ParseRate(item, value, &config.mem_bw);
    } else if (key == "h2d") {
      status = ParseRate(item, value, &config.h2d_bw);
    } else if (key == "d2h") {
      status = ParseRate(item, value, &config.d2h_bw);
    } else if (key == "d2d") {
      status = ParseRate(item, value, &config.d2d_bw);
    } else if (key == "pageable") {
      status = ParseRate(item, value, &config.pageable_bw);
    } else if (key == "lat") {
      status = ParseDuration(item, value, &config.latency_ns);
    } else if (key == "launch") {
      status = ParseDuration(item, value, &config.launch_ns);
    } else if (key == "scale") {
      absl::string_view suffix;
      if (!SplitNumber(value, &config.time_scale, &suffix) || !suffix.empty() ||
          config.time_scale <= 0) {
        status = Error(item, "expected a positive number");
      }
    } else if (key == "guard") {
      const std::string lower = absl::AsciiStrToLower(value);
      if (lower == "on" || lower == "1" || lower == "true") {
        config.guard = SimConfig::Guard::kOn;
      } else if (lower == "off" || lower == "0" || lower == "false") {
        config.guard = SimConfig::Guard::kOff;
      } else {
        status = Error(item, "expected on or off");
      }
    } else if (key == "ops") {
      // The op list continues over the following items that have no '='.
      std::vector<absl::string_view> names;
      if (!value.empty()) names.push_back(value);
      std::string full(item);
      while (i + 1 < items.size() &&
             items[i + 1].find('=') == absl::string_view::npos) {
        ++i;
        names.push_back(absl::StripAsciiWhitespace(items[i]));
        absl::StrAppend(&full, ",", names.back());
      }
      status = ParseOps(full, names, &config.ops);
    } else if (key == "fail_alloc") {
      status = ParseCount(item, value, &config.faults.alloc);
    } else if (key == "fail_copy") {
      status = ParseCount(item, value, &config.faults.copy);
    } else if (key == "fail_kernel") {
      status = ParseCount(item, value, &config.faults.kernel);
    } else {
      status = Error(
          item, absl::StrCat("unknown key '", key, "' (keys: ", kKeys, ")"));
    }
    if (!status.ok()) return status;
  }
  if (config.max_alloc_bytes > config.mem_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim config: max_alloc (", config.max_alloc_bytes,
                     " bytes) exceeds mem (", config.mem_bytes, " bytes)"));
  }
  return config;
}

}  // namespace ferry
