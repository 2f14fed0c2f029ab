#include "ferry/models/open_model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ferry/models/gguf/gguf_file.h"
#include "ferry/models/llama/llama_gguf.h"
#include "ferry/models/llama/llama_hf.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/thread_pool.h"
#include "ferry/tokenizer/gguf_tokenizer.h"
#include "ferry/tokenizer/hf_tokenizer_json.h"

namespace ferry {
namespace {

std::string Bytes(int64_t b) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(b) / (1 << 20));
}

// The template the caller asked for: the model's own (`source`, from
// `origin`), a named family, or none.
absl::StatusOr<std::optional<tokenizer::ChatTemplate>> PickTemplate(
    const std::string& choice, const std::string& source,
    const std::string& origin) {
  if (choice == "none") return std::nullopt;
  if (!choice.empty()) {
    FERRY_ASSIGN_OR_RETURN(tokenizer::ChatTemplate t,
                           tokenizer::ChatTemplate::FromName(choice));
    return t;
  }
  if (source.empty()) return std::nullopt;
  FERRY_ASSIGN_OR_RETURN(tokenizer::ChatTemplate t,
                         tokenizer::ChatTemplate::FromSource(source, origin));
  return t;
}

// Everything but the weights of a model, checked.
struct Prepared {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::optional<tokenizer::ChatTemplate> chat_template;
  std::string bos_token;  // "": the tokenizer's BOS.
};

absl::StatusOr<Prepared> PrepareHf(const std::string& dir,
                                   const OpenModelOptions& options) {
  // Config and every weight file's header before the tokenizer.
  FERRY_RETURN_IF_ERROR(llama::ReadHfDirectory(dir, options.n_ctx).status());
  FERRY_ASSIGN_OR_RETURN(tokenizer::HfDirectoryTokenizer tok,
                         tokenizer::TokenizerFromHfDirectory(dir));
  Prepared out;
  out.tokenizer = std::move(tok.tokenizer);
  out.bos_token = tok.bos_token;
  FERRY_ASSIGN_OR_RETURN(
      out.chat_template,
      PickTemplate(options.chat_template, tok.chat_template,
                   absl::StrCat(dir, "/tokenizer_config.json chat_template")));
  return out;
}

absl::StatusOr<Prepared> PrepareGguf(const std::string& path,
                                     const OpenModelOptions& options) {
  FERRY_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::Open(path));
  FERRY_RETURN_IF_ERROR(
      llama::LlamaConfigFromGguf(file, options.n_ctx).status());
  Prepared out;
  FERRY_ASSIGN_OR_RETURN(out.tokenizer, tokenizer::TokenizerFromGguf(file));
  std::string source;
  if (file.Has("tokenizer.chat_template")) {
    FERRY_ASSIGN_OR_RETURN(source, file.GetString("tokenizer.chat_template"));
  }
  FERRY_ASSIGN_OR_RETURN(
      out.chat_template,
      PickTemplate(options.chat_template, source,
                   absl::StrCat(path, ": tokenizer.chat_template")));
  return out;
}

}  // namespace

absl::StatusOr<OpenedModel> OpenModel(const std::string& path,
                                      std::vector<Backend*> backends,
                                      const OpenModelOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  OpenedModel out;
  out.format =
      S_ISDIR(st.st_mode) ? ModelFormat::kHuggingFace : ModelFormat::kGguf;
  FERRY_ASSIGN_OR_RETURN(Prepared prepared,
                         out.format == ModelFormat::kHuggingFace
                             ? PrepareHf(path, options)
                             : PrepareGguf(path, options));
  out.tokenizer = std::move(prepared.tokenizer);
  out.chat_template = std::move(prepared.chat_template);
  out.bos_token = prepared.bos_token;
  if (const int32_t bos = out.tokenizer->bos_id();
      out.bos_token.empty() && bos >= 0) {
    out.bos_token = std::string(out.tokenizer->IdToToken(bos));
  }

  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<IoReactor> own_io;
  IoReactor* io = options.io;
  if (io == nullptr) {
    pool = std::make_unique<ThreadPool>(2);
    FERRY_ASSIGN_OR_RETURN(own_io, IoReactor::Create(pool.get()));
    io = own_io.get();
  }
  if (out.format == ModelFormat::kHuggingFace) {
    llama::HfLoadStats load;
    FERRY_ASSIGN_OR_RETURN(
        out.model, llama::LoadLlamaHf(path, backends, options.model, *io,
                                      options.n_ctx, &load));
    out.summary = absl::StrFormat(
        "loaded %s with %s: %s of tensors in %d file(s) converted to %s of "
        "f32 weights in %.3f s",
        path, io->name(), Bytes(load.file_bytes), load.shards,
        Bytes(load.weight_bytes), load.seconds);
  } else {
    llama::GgufLoadStats load;
    FERRY_ASSIGN_OR_RETURN(
        out.model, llama::LoadLlamaGguf(path, backends, options.model, *io,
                                        options.n_ctx, &load));
    out.summary = absl::StrFormat(
        "loaded %s with %s: %s of tensors loaded as %s of weights in %.3f s",
        path, io->name(), Bytes(load.file_bytes), Bytes(load.weight_bytes),
        load.seconds);
  }
  return out;
}

}  // namespace ferry
