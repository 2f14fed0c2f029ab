#include "ferry/tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/tokenizer/pretokenizer_patterns.h"
#include "nlohmann/json.hpp"

namespace ferry::tokenizer {
namespace {

using Json = nlohmann::json;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // "▁"
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// Builds errors that name the file and the JSON path.
class Context {
 public:
  explicit Context(const std::string& name) : name_(name) {}
  absl::Status Invalid(absl::string_view path, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", path, ": ", what));
  }
  absl::Status Unsupported(absl::string_view path,
                           absl::string_view what) const {
    return absl::UnimplementedError(
        absl::StrCat(name_, ": ", path, ": ", what, " is not supported"));
  }

 private:
  const std::string& name_;
};

// Typed field access without exceptions: missing or null fields give the
// fallback; a field of the wrong type is an error.
absl::StatusOr<bool> Bool(const Context& c, const Json& j, const char* key,
                          absl::string_view path, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return c.Invalid(absl::StrCat(path, ".", key), "not a boolean");
  }
  return it->get<bool>();
}

absl::StatusOr<std::string> String(const Context& c, const Json& j,
                                   const char* key, absl::string_view path,
                                   bool required = true) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return std::string();
    return c.Invalid(absl::StrCat(path, ".", key), "missing");
  }
  if (!it->is_string()) {
    return c.Invalid(absl::StrCat(path, ".", key), "not a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<int64_t> Int(const Context& c, const Json& j, const char* key,
                            absl::string_view path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return c.Invalid(absl::StrCat(path, ".", key), "missing or not an integer");
  }
  return it->get<int64_t>();
}

// The "type" of a component, or "" for null.
absl::StatusOr<std::string> Type(const Context& c, const Json& j,
                                 absl::string_view path) {
  if (j.is_null()) return std::string();
  if (!j.is_object()) return c.Invalid(path, "not an object");
  return String(c, j, "type", path);
}

// Escapes `s` for use as a literal PCRE2 pattern.
std::string QuoteRegex(absl::string_view s) {
  std::string out;
  for (char ch : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string::npos) {
      out += '\\';
    }
    out += ch;
  }
  return out;
}

// `max_id`: ids must stay below it (the number of vocab and added entries),
// so a hostile file cannot make us allocate for ids it does not have.
absl::Status AddModel(const Context& c, const Json& model, int64_t max_id,
                      TokenizerSpec& spec, std::vector<bool>& used) {
  FERRY_ASSIGN_OR_RETURN(std::string type, Type(c, model, "model"));
  if (type != "BPE") {
    return c.Unsupported("model.type", absl::StrCat("'", type, "'"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    FERRY_ASSIGN_OR_RETURN(std::string v,
                           String(c, model, key, "model", /*required=*/false));
    if (!v.empty()) return c.Unsupported(absl::StrCat("model.", key), v);
  }
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() &&
      !(it->is_number() && it->get<double>() == 0)) {
    return c.Unsupported("model.dropout", "BPE dropout");
  }
  FERRY_ASSIGN_OR_RETURN(spec.fuse_unk,
                         Bool(c, model, "fuse_unk", "model", false));
  FERRY_ASSIGN_OR_RETURN(spec.byte_fallback,
                         Bool(c, model, "byte_fallback", "model", false));
  FERRY_ASSIGN_OR_RETURN(spec.ignore_merges,
                         Bool(c, model, "ignore_merges", "model", false));
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return c.Invalid("model.vocab", "missing or not an object");
  }
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return c.Invalid(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                       "id is not an integer");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= max_id) {
      return c.Invalid(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                       absl::StrCat("id ", id, " is outside [0, ", max_id,
                                    "), the number of entries"));
    }
    if (id >= static_cast<int64_t>(spec.tokens.size())) {
      spec.tokens.resize(id + 1);
      used.resize(id + 1, false);
    }
    if (used[id]) {
      return c.Invalid(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                       absl::StrCat("id ", id, " is used twice"));
    }
    used[id] = true;
    spec.tokens[id] = it.key();
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return c.Invalid("model.merges", "missing or not an array");
  }
  spec.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    const std::string path = absl::StrCat("model.merges[", i, "]");
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos ||
          s.find(' ', space + 1) != std::string::npos) {
        return c.Invalid(path, absl::StrCat("'", s, "' is not two tokens"));
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(),
                               m[1].get<std::string>());
    } else {
      return c.Invalid(path, "not \"a b\" or [\"a\", \"b\"]");
    }
  }
  return absl::OkStatus();
}

absl::Status AddNormalizer(const Context& c, const Json& j,
                           const std::string& path, TokenizerSpec& spec) {
  FERRY_ASSIGN_OR_RETURN(std::string type, Type(c, j, path));
  if (type.empty()) return absl::OkStatus();
  if (type == "Sequence") {
    auto list = j.find("normalizers");
    if (list == j.end() || !list->is_array()) {
      return c.Invalid(path, "Sequence without normalizers");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      FERRY_RETURN_IF_ERROR(AddNormalizer(
          c, (*list)[i], absl::StrCat(path, ".normalizers[", i, "]"), spec));
    }
  } else if (type == "Prepend") {
    FERRY_ASSIGN_OR_RETURN(std::string prepend, String(c, j, "prepend", path));
    spec.normalizer.push_back({NormalizerStep::Kind::kPrepend, "", prepend});
  } else if (type == "Replace") {
    auto pattern = j.find("pattern");
    if (pattern == j.end() || !pattern->is_object() ||
        !pattern->contains("String") || !(*pattern)["String"].is_string()) {
      return c.Unsupported(path, "Replace without a literal String pattern");
    }
    FERRY_ASSIGN_OR_RETURN(std::string content, String(c, j, "content", path));
    spec.normalizer.push_back({NormalizerStep::Kind::kReplace,
                               (*pattern)["String"].get<std::string>(),
                               content});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" ||
             type == "NFKD") {
    const auto kind = type == "NFC"    ? NormalizerStep::Kind::kNfc
                      : type == "NFD"  ? NormalizerStep::Kind::kNfd
                      : type == "NFKC" ? NormalizerStep::Kind::kNfkc
                                       : NormalizerStep::Kind::kNfkd;
    spec.normalizer.push_back({kind, "", ""});
  } else {
    return c.Unsupported(path, absl::StrCat("normalizer '", type, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> Behavior(const Context& c, const Json& j,
                                       const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string b, String(c, j, "behavior", path));
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  return c.Unsupported(absl::StrCat(path, ".behavior"),
                       absl::StrCat("'", b, "'"));
}

absl::Status AddPreTokenizer(const Context& c, const Json& j,
                             const std::string& path, TokenizerSpec& spec) {
  FERRY_ASSIGN_OR_RETURN(std::string type, Type(c, j, path));
  if (type.empty()) return absl::OkStatus();
  if (spec.byte_level && type != "Sequence") {
    // Splits after ByteLevel would see mapped text.
    return c.Unsupported(path, absl::StrCat("'", type, "' after ByteLevel"));
  }
  if (type == "Sequence") {
    auto list = j.find("pretokenizers");
    if (list == j.end() || !list->is_array()) {
      return c.Invalid(path, "Sequence without pretokenizers");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      FERRY_RETURN_IF_ERROR(AddPreTokenizer(
          c, (*list)[i], absl::StrCat(path, ".pretokenizers[", i, "]"), spec));
    }
  } else if (type == "Split") {
    FERRY_ASSIGN_OR_RETURN(bool invert, Bool(c, j, "invert", path, false));
    if (invert) return c.Unsupported(path, "an inverted Split");
    FERRY_ASSIGN_OR_RETURN(SplitBehavior behavior, Behavior(c, j, path));
    auto pattern = j.find("pattern");
    if (pattern != j.end() && pattern->is_object() &&
        pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      spec.splits.emplace_back((*pattern)["Regex"].get<std::string>(),
                               behavior);
    } else if (pattern != j.end() && pattern->is_object() &&
               pattern->contains("String") &&
               (*pattern)["String"].is_string()) {
      spec.splits.emplace_back(
          QuoteRegex((*pattern)["String"].get<std::string>()), behavior);
    } else {
      return c.Invalid(absl::StrCat(path, ".pattern"),
                       "neither {\"Regex\": ...} nor {\"String\": ...}");
    }
  } else if (type == "ByteLevel") {
    FERRY_ASSIGN_OR_RETURN(bool use_regex, Bool(c, j, "use_regex", path, true));
    FERRY_ASSIGN_OR_RETURN(spec.byte_level_add_prefix_space,
                           Bool(c, j, "add_prefix_space", path, true));
    if (use_regex)
      spec.splits.emplace_back(kGpt2Pattern, SplitBehavior::kIsolated);
    spec.byte_level = true;
  } else if (type == "Digits") {
    FERRY_ASSIGN_OR_RETURN(bool individual,
                           Bool(c, j, "individual_digits", path, false));
    spec.splits.emplace_back(individual ? kDigitPattern : kDigitsPattern,
                             SplitBehavior::kIsolated);
  } else {
    return c.Unsupported(path, absl::StrCat("pre-tokenizer '", type, "'"));
  }
  return absl::OkStatus();
}

absl::Status AddPostProcessor(const Context& c, const Json& j,
                              const std::string& path, TokenizerSpec& spec) {
  FERRY_ASSIGN_OR_RETURN(std::string type, Type(c, j, path));
  if (type.empty() || type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) {
      return c.Invalid(path, "Sequence without processors");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      FERRY_RETURN_IF_ERROR(AddPostProcessor(
          c, (*list)[i], absl::StrCat(path, ".processors[", i, "]"), spec));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return c.Unsupported(path, absl::StrCat("post-processor '", type, "'"));
  }
  auto single = j.find("single");
  auto specials = j.find("special_tokens");
  if (single == j.end() || !single->is_array() || specials == j.end() ||
      !specials->is_object()) {
    return c.Invalid(path, "TemplateProcessing without single/special_tokens");
  }
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string piece_path = absl::StrCat(path, ".single[", i, "]");
    if (piece.contains("Sequence")) {
      if (seen_sequence) return c.Unsupported(piece_path, "a second Sequence");
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].is_object()) {
      return c.Invalid(piece_path, "neither Sequence nor SpecialToken");
    }
    FERRY_ASSIGN_OR_RETURN(std::string name,
                           String(c, piece["SpecialToken"], "id", piece_path));
    auto token = specials->find(name);
    if (token == specials->end() || !token->is_object() ||
        !token->contains("ids") || !(*token)["ids"].is_array()) {
      return c.Invalid(piece_path,
                       absl::StrCat("special token '", name, "' has no ids"));
    }
    for (const Json& id : (*token)["ids"]) {
      if (!id.is_number_integer()) {
        return c.Invalid(piece_path, "special token id is not an integer");
      }
      (seen_sequence ? spec.suffix_ids : spec.prefix_ids)
          .push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
  return absl::OkStatus();
}

absl::Status AddDecoder(const Context& c, const Json& j,
                        const std::string& path, TokenizerSpec& spec,
                        bool& byte_fallback, bool& fused) {
  FERRY_ASSIGN_OR_RETURN(std::string type, Type(c, j, path));
  if (type.empty() || type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto list = j.find("decoders");
    if (list == j.end() || !list->is_array()) {
      return c.Invalid(path, "Sequence without decoders");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      FERRY_RETURN_IF_ERROR(AddDecoder(c, (*list)[i],
                                       absl::StrCat(path, ".decoders[", i, "]"),
                                       spec, byte_fallback, fused));
    }
  } else if (type == "Replace") {
    FERRY_ASSIGN_OR_RETURN(std::string content, String(c, j, "content", path));
    auto pattern = j.find("pattern");
    if (pattern == j.end() || !pattern->is_object() ||
        !pattern->contains("String") || (*pattern)["String"] != kMetaspace ||
        content != " ") {
      return c.Unsupported(path, "a Replace other than \"▁\" -> \" \"");
    }
    spec.decode_metaspace = true;
  } else if (type == "ByteFallback") {
    byte_fallback = true;
  } else if (type == "Fuse") {
    fused = true;
  } else if (type == "Strip") {
    FERRY_ASSIGN_OR_RETURN(std::string content, String(c, j, "content", path));
    FERRY_ASSIGN_OR_RETURN(int64_t start, Int(c, j, "start", path));
    FERRY_ASSIGN_OR_RETURN(int64_t stop, Int(c, j, "stop", path));
    if (content != " " || start != 1 || stop != 0 || !fused) {
      return c.Unsupported(path,
                           "a Strip other than one leading space after Fuse");
    }
    spec.decode_strip_leading_space = true;
  } else if (type == "Metaspace") {
    FERRY_ASSIGN_OR_RETURN(std::string replacement,
                           String(c, j, "replacement", path));
    if (replacement != kMetaspace) {
      return c.Unsupported(path, "a Metaspace replacement other than \"▁\"");
    }
    FERRY_ASSIGN_OR_RETURN(std::string scheme,
                           String(c, j, "prepend_scheme", path, false));
    FERRY_ASSIGN_OR_RETURN(bool add_prefix_space,
                           Bool(c, j, "add_prefix_space", path, true));
    spec.decode_metaspace = true;
    spec.decode_strip_leading_space =
        scheme.empty() ? add_prefix_space : scheme != "never";
  } else {
    return c.Unsupported(path, absl::StrCat("decoder '", type, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> TokenizerSpecFromHfJson(
    absl::string_view text, const std::string& name,
    absl::string_view eos_token) {
  const Context c(name);
  const Json root = Json::parse(text.begin(), text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded()) return c.Invalid("(root)", "not valid JSON");
  if (!root.is_object()) return c.Invalid("(root)", "not a JSON object");
  TokenizerSpec spec;
  std::vector<bool> used;
  auto model = root.find("model");
  if (model == root.end()) return c.Invalid("model", "missing");
  int64_t max_id = 0;
  if (auto v = model->find("vocab"); v != model->end()) {
    max_id += static_cast<int64_t>(v->size());
  }
  if (auto a = root.find("added_tokens"); a != root.end() && a->is_array()) {
    max_id += static_cast<int64_t>(a->size());
  }
  max_id = std::min(max_id, kMaxVocab);
  FERRY_RETURN_IF_ERROR(AddModel(c, *model, max_id, spec, used));
  if (auto added = root.find("added_tokens");
      added != root.end() && !added->is_null()) {
    if (!added->is_array()) return c.Invalid("added_tokens", "not an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& t = (*added)[i];
      const std::string path = absl::StrCat("added_tokens[", i, "]");
      if (!t.is_object()) return c.Invalid(path, "not an object");
      AddedTokenSpec a;
      FERRY_ASSIGN_OR_RETURN(int64_t id, Int(c, t, "id", path));
      if (id < 0 || id >= kMaxVocab) {
        return c.Invalid(path, absl::StrCat("id ", id, " out of range"));
      }
      if (id >= max_id) {
        return c.Invalid(path,
                         absl::StrCat("id ", id, " is outside [0, ", max_id,
                                      "), the number of entries"));
      }
      a.id = static_cast<int32_t>(id);
      FERRY_ASSIGN_OR_RETURN(a.content, String(c, t, "content", path));
      FERRY_ASSIGN_OR_RETURN(a.special, Bool(c, t, "special", path, false));
      FERRY_ASSIGN_OR_RETURN(a.lstrip, Bool(c, t, "lstrip", path, false));
      FERRY_ASSIGN_OR_RETURN(a.rstrip, Bool(c, t, "rstrip", path, false));
      FERRY_ASSIGN_OR_RETURN(a.single_word,
                             Bool(c, t, "single_word", path, false));
      if (id >= static_cast<int64_t>(spec.tokens.size())) {
        spec.tokens.resize(id + 1);
        used.resize(id + 1, false);
      }
      if (used[id] && spec.tokens[id] != a.content) {
        return c.Invalid(path, absl::StrCat("id ", id, " is '", spec.tokens[id],
                                            "' in the vocab"));
      }
      used[id] = true;
      spec.tokens[id] = a.content;
      spec.added_tokens.push_back(std::move(a));
    }
  }
  spec.kinds.assign(spec.tokens.size(), TokenKind::kNormal);
  for (size_t id = 0; id < used.size(); ++id) {
    if (!used[id]) spec.kinds[id] = TokenKind::kUnused;
  }
  FERRY_ASSIGN_OR_RETURN(std::string unk,
                         String(c, *model, "unk_token", "model", false));
  if (!unk.empty()) {
    auto vocab = model->find("vocab");
    auto it = vocab->find(unk);
    if (it == vocab->end()) {
      return c.Invalid("model.unk_token",
                       absl::StrCat("'", unk, "' is not in the vocab"));
    }
    spec.unk_id = static_cast<int32_t>(it->get<int64_t>());
  }
  if (auto n = root.find("normalizer"); n != root.end()) {
    FERRY_RETURN_IF_ERROR(AddNormalizer(c, *n, "normalizer", spec));
  }
  if (auto p = root.find("pre_tokenizer"); p != root.end()) {
    FERRY_RETURN_IF_ERROR(AddPreTokenizer(c, *p, "pre_tokenizer", spec));
  }
  if (auto p = root.find("post_processor"); p != root.end()) {
    FERRY_RETURN_IF_ERROR(AddPostProcessor(c, *p, "post_processor", spec));
  }
  bool byte_fallback_decoder = false, fused = false;
  if (auto d = root.find("decoder"); d != root.end()) {
    FERRY_RETURN_IF_ERROR(
        AddDecoder(c, *d, "decoder", spec, byte_fallback_decoder, fused));
  }
  if (byte_fallback_decoder) {
    // <0xXX> tokens decode to their byte.
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      const std::string& t = spec.tokens[id];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4])) &&
          spec.kinds[id] == TokenKind::kNormal) {
        spec.kinds[id] = TokenKind::kByte;
      }
    }
  }
  if (!eos_token.empty()) {
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (spec.tokens[id] == eos_token) spec.eos_id = static_cast<int32_t>(id);
    }
    if (spec.eos_id < 0) {
      return c.Invalid("eos_token",
                       absl::StrCat("'", eos_token, "' is not a token"));
    }
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJson(
    absl::string_view json, const std::string& name,
    absl::string_view eos_token) {
  FERRY_ASSIGN_OR_RETURN(TokenizerSpec spec,
                         TokenizerSpecFromHfJson(json, name, eos_token));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Create(std::move(spec));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(name, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return buffer.str();
}

// A special token of tokenizer_config.json: a string, an AddedToken object
// ({"content": ...}) or null ("").
absl::StatusOr<std::string> ConfigToken(const Json& root, const char* key,
                                        const std::string& file) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      return content->get<std::string>();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": '", key, "' is neither a token nor null"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJsonFile(
    const std::string& path, absl::string_view eos_token) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return TokenizerFromHfJson(text, path, eos_token);
}

absl::StatusOr<HfDirectoryTokenizer> TokenizerFromHfDirectory(
    const std::string& dir) {
  HfDirectoryTokenizer out;
  std::string eos_token;
  const std::string config_path = absl::StrCat(dir, "/tokenizer_config.json");
  if (std::ifstream(config_path).good()) {
    FERRY_ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
    const Json root = Json::parse(text.begin(), text.end(), nullptr,
                                  /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": not a JSON object"));
    }
    FERRY_ASSIGN_OR_RETURN(eos_token,
                           ConfigToken(root, "eos_token", config_path));
    FERRY_ASSIGN_OR_RETURN(out.bos_token,
                           ConfigToken(root, "bos_token", config_path));
    auto tmpl = root.find("chat_template");
    if (tmpl != root.end() && tmpl->is_string()) {
      out.chat_template = tmpl->get<std::string>();
    }
  }
  FERRY_ASSIGN_OR_RETURN(
      out.tokenizer,
      TokenizerFromHfJsonFile(absl::StrCat(dir, "/tokenizer.json"), eos_token));
  return out;
}

}  // namespace ferry::tokenizer
