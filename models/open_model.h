// OpenModel: the one call that opens a model a person has (a GGUF file or a
// Hugging Face directory) onto backends, with its tokenizer and its chat
// template.
//
// The path's kind decides the layout: a directory is a Hugging Face model
// (config.json, model.safetensors or its sharded index, tokenizer.json,
// tokenizer_config.json's chat_template), a file is GGUF (weights,
// tokenizer.ggml.*, tokenizer.chat_template). Everything is checked before
// any weight is allocated: the architecture and hyperparameters, every
// tensor's presence, shape and type (errors name the tensor and the file),
// the tokenizer, and the chat template, which must be of a family ferry
// formats (tokenizer/chat_template.h) unless the caller names one or
// "none".
#ifndef FERRY_MODELS_OPEN_MODEL_H_
#define FERRY_MODELS_OPEN_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/backends/backend.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"
#include "ferry/tokenizer/chat_template.h"
#include "ferry/tokenizer/tokenizer.h"

namespace ferry {

enum class ModelFormat { kGguf, kHuggingFace };

struct OpenModelOptions {
  // Placement and weight dtypes (llama_model.h). Left null, weight_dtype
  // keeps a GGUF's quantized blocks where the device computes on them.
  llama::LlamaModelOptions model;
  // KV positions the model is made for; 0: its training context, capped at
  // 4096.
  int64_t n_ctx = 0;
  // "": the model's own template (an unknown one is an error naming it);
  // a family name (chatml, qwen, llama3, gemma, phi3) in its place; "none":
  // no template.
  std::string chat_template;
  // Reads tensor bytes; null: OpenModel makes an io_uring reactor (or its
  // fallback) for the load.
  IoReactor* io = nullptr;
};

struct OpenedModel {
  ModelFormat format = ModelFormat::kGguf;
  std::unique_ptr<llama::LlamaModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  // Absent when the model has none (or the caller said "none").
  std::optional<tokenizer::ChatTemplate> chat_template;
  // The text of the BOS token a template renders: tokenizer_config.json's
  // bos_token, else the tokenizer's BOS ("" if none).
  std::string bos_token;
  // "loaded PATH with io_uring: 103.0 MiB of tensors ... in 0.2 s".
  std::string summary;
};

// Opens the model at `path` onto `backends` (in the scheduler's order, the
// CPU last; not owned). Nothing stays allocated on error.
absl::StatusOr<OpenedModel> OpenModel(const std::string& path,
                                      std::vector<Backend*> backends,
                                      const OpenModelOptions& options = {});

}  // namespace ferry

#endif  // FERRY_MODELS_OPEN_MODEL_H_
