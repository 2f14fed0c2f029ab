#include "ferry/examples/workload.h"

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace ferry::examples {
namespace {

using Json = nlohmann::json;

template <typename T>
absl::Status GetInt(const Json& j, const char* key, int64_t lo, int64_t hi,
                    T* out, const std::string& where) {
  if (!j.contains(key)) return absl::OkStatus();
  const Json& v = j.at(key);
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "\"", key, "\" must be an integer"));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "\"", key, "\" = ", x, " must be in [", lo, ", ", hi, "]"));
  }
  *out = static_cast<T>(x);
  return absl::OkStatus();
}

absl::Status GetFloat(const Json& j, const char* key, float* out,
                      const std::string& where) {
  if (!j.contains(key)) return absl::OkStatus();
  const Json& v = j.at(key);
  if (!v.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "\"", key, "\" must be a number"));
  }
  *out = v.get<float>();
  return absl::OkStatus();
}

absl::Status GetIds(const Json& j, const char* key, int64_t lo, int64_t hi,
                    std::vector<int64_t>* out, const std::string& where) {
  if (!j.contains(key)) return absl::OkStatus();
  const Json& v = j.at(key);
  if (!v.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "\"", key, "\" must be an array of integers"));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "\"", key, "\"[", i, "] must be an integer"));
    }
    const int64_t x = v[i].get<int64_t>();
    if (x < lo || x >= hi) {
      return absl::InvalidArgumentError(absl::StrCat(where, "\"", key, "\"[", i,
                                                     "] = ", x, " outside [",
                                                     lo, ", ", hi, ")"));
    }
    out->push_back(x);
  }
  return absl::OkStatus();
}

// The "messages" of a request formatted with `chat`.
absl::StatusOr<std::string> FormatMessages(const Json& v,
                                           const ChatFormatter& chat,
                                           const std::string& where) {
  if (!v.is_array() || v.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "\"messages\" must be a non-empty array of objects"));
  }
  std::vector<tokenizer::ChatMessage> messages;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& m = v[i];
    const std::string at = absl::StrCat(where, "\"messages\"[", i, "]");
    if (!m.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(at, " must be an object"));
    }
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key) || !m.at(key).is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".", key, " must be a string"));
      }
    }
    messages.push_back(
        {m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  }
  if (chat == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "\"messages\" need a model with a chat template (--model)"));
  }
  absl::StatusOr<std::string> formatted = chat(messages);
  if (!formatted.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "\"messages\": ", formatted.status().message()));
  }
  return formatted;
}

}  // namespace

absl::StatusOr<std::vector<engine::Request>> ParseRequests(
    absl::string_view text, absl::string_view source, int64_t n_vocab,
    int default_max_new_tokens, const TextEncoder& encode,
    const ChatFormatter& chat) {
  std::vector<engine::Request> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const std::string where = absl::StrCat(source, ":", line_no, ": ");
    Json j = Json::parse(line.begin(), line.end(), nullptr,
                         /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "not a JSON object"));
    }
    engine::Request r;
    r.max_new_tokens = default_max_new_tokens;
    if (j.contains("id")) {
      const Json& id = j.at("id");
      if (id.is_string()) {
        r.id = id.get<std::string>();
      } else if (id.is_number_integer()) {
        r.id = std::to_string(id.get<int64_t>());
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "\"id\" must be a string or an integer"));
      }
    } else {
      r.id = std::to_string(line_no);
    }
    const int given =
        j.contains("tokens") + j.contains("text") + j.contains("messages");
    if (given != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "needs exactly one of \"tokens\", \"text\" and "
                       "\"messages\""));
    }
    const char* field = j.contains("text")       ? "text"
                        : j.contains("messages") ? "messages"
                                                 : "tokens";
    const bool has_text = j.contains("text") || j.contains("messages");
    std::vector<int64_t> ids;
    if (has_text) {
      std::string prompt;
      if (j.contains("messages")) {
        absl::StatusOr<std::string> formatted =
            FormatMessages(j.at("messages"), chat, where);
        if (!formatted.ok()) return formatted.status();
        prompt = *std::move(formatted);
      } else if (!j.at("text").is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "\"text\" must be a string"));
      } else {
        prompt = j.at("text").get<std::string>();
      }
      if (encode == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "\"", field, "\" needs a model with a tokenizer (--model)"));
      }
      absl::StatusOr<std::vector<int32_t>> encoded = encode(prompt);
      if (!encoded.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "\"", field, "\": ", encoded.status().message()));
      }
      for (int32_t id : *encoded) {
        if (id < 0 || id >= n_vocab) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, "\"", field, "\" encodes to id ", id,
                           " outside the model's vocabulary of ", n_vocab));
        }
      }
      ids.assign(encoded->begin(), encoded->end());
    } else if (absl::Status s = GetIds(j, "tokens", 0, n_vocab, &ids, where);
               !s.ok()) {
      return s;
    }
    if (ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "empty \"", field, "\""));
    }
    r.prompt.assign(ids.begin(), ids.end());
    ids.clear();
    if (absl::Status s = GetIds(j, "stop", 0, n_vocab, &ids, where); !s.ok()) {
      return s;
    }
    r.stop_tokens.assign(ids.begin(), ids.end());
    if (absl::Status s = GetIds(j, "logits_positions", 0, int64_t{1} << 30,
                                &r.logits_positions, where);
        !s.ok()) {
      return s;
    }
    for (absl::Status s :
         {GetInt(j, "max_new_tokens", 1, 1 << 24, &r.max_new_tokens, where),
          GetInt(j, "top_k", 0, 1 << 24, &r.sampling.top_k, where),
          GetInt(j, "seed", 0, std::numeric_limits<int64_t>::max(),
                 &r.sampling.seed, where),
          GetFloat(j, "temperature", &r.sampling.temperature, where),
          GetFloat(j, "top_p", &r.sampling.top_p, where)}) {
      if (!s.ok()) return s;
    }
    if (absl::Status s = r.sampling.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no requests (expected JSON lines)"));
  }
  return out;
}

absl::StatusOr<std::vector<engine::Request>> ReadRequests(
    const std::string& path, int64_t n_vocab, int default_max_new_tokens,
    const TextEncoder& encode, const ChatFormatter& chat) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "--prompts=", path, ": cannot open (", strerror(errno), ")"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseRequests(text.str(), path, n_vocab, default_max_new_tokens,
                       encode, chat);
}

std::vector<engine::Request> MakeRequests(const SyntheticWorkload& w,
                                          int64_t n_vocab) {
  std::mt19937_64 rng(w.seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<engine::Request> out;
  for (int k = 0; k < w.requests; ++k) {
    engine::Request r;
    r.id = absl::StrCat("req", k);
    const int64_t n = uniform(w.min_prompt, w.max_prompt);
    for (int64_t i = 0; i < n; ++i) {
      r.prompt.push_back(static_cast<int32_t>(uniform(0, n_vocab - 1)));
    }
    r.max_new_tokens = static_cast<int>(uniform(w.min_new, w.max_new));
    out.push_back(std::move(r));
  }
  return out;
}

std::string ResultToJson(
    const engine::Result& r, int64_t prompt_tokens,
    const std::vector<std::pair<int64_t, int64_t>>& logits_rows,
    const std::string* text) {
  Json j;
  j["id"] = r.id;
  j["tokens"] = r.tokens;
  if (text != nullptr) j["text"] = *text;
  j["finish"] = std::string(engine::FinishReasonName(r.finish));
  j["prompt_tokens"] = prompt_tokens;
  j["ttft_ms"] = static_cast<double>(r.first_token_ns - r.submitted_ns) / 1e6;
  j["latency_ms"] = static_cast<double>(r.finished_ns - r.submitted_ns) / 1e6;
  j["itl_ms_mean"] =
      r.token_ns.size() < 2
          ? 0.0
          : static_cast<double>(r.token_ns.back() - r.token_ns.front()) / 1e6 /
                static_cast<double>(r.token_ns.size() - 1);
  j["non_finite_logits"] = r.non_finite_logits;
  if (!logits_rows.empty()) {
    Json rows = Json::object();
    for (const auto& [pos, row] : logits_rows) rows[std::to_string(pos)] = row;
    j["logits_rows"] = rows;
  }
  return j.dump();
}

}  // namespace ferry::examples
