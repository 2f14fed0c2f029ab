#include "ferry/models/llama/llama_gguf.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ferry/backends/buffer.h"
#include "ferry/graph/context.h"
#include "ferry/graph/ops.h"
#include "ferry/models/gguf/gguf_tensor_reader.h"
#include "ferry/models/gguf/llama_hparams.h"
#include "ferry/quant/dequantize.h"
#include "ferry/quant/quant_dtype.h"
#include "ferry/quant/quantize.h"
#include "ferry/runtime/status_macros.h"
#include "ferry/runtime/sync_wait.h"

namespace ferry::llama {
namespace {

// Positions a KV cache gets when the caller does not say (SmolLM2 was
// trained for 8192; a cache that long is rarely what a test wants).
constexpr int64_t kDefaultMaxCtx = 4096;

// Checks one model weight against its GGUF tensor: present, same shape
// (trailing 1s ignored), a type we can dequantize.
absl::StatusOr<const gguf::GgufTensorInfo*> MatchTensor(
    const gguf::GgufFile& file, const std::string& canonical,
    std::vector<int64_t> want) {
  const std::string name = GgufTensorName(canonical);
  const gguf::GgufTensorInfo* t = file.FindTensor(name);
  if (t == nullptr) {
    return file.Error(absl::StatusCode::kNotFound,
                      absl::StrCat("tensor '", name, "' is missing"));
  }
  std::vector<int64_t> have = t->dims;
  while (have.size() > 1 && have.back() == 1) have.pop_back();
  while (want.size() > 1 && want.back() == 1) want.pop_back();
  if (have != want) {
    return file.Error(
        absl::StatusCode::kInvalidArgument,
        absl::StrCat("tensor '", name, "' has dims [",
                     absl::StrJoin(have, ", "), "], the model needs [",
                     absl::StrJoin(want, ", "), "]"));
  }
  if (!quant::CanDequantize(t->type)) {
    return file.Error(absl::StatusCode::kUnimplemented,
                      absl::StrCat("tensor '", name, "' has type ",
                                   quant::QuantTypeName(t->type),
                                   ", which ferry cannot dequantize yet"));
  }
  return t;
}

// The GGUF tensor of every weight of `model`, checked.
absl::StatusOr<std::vector<std::pair<Tensor*, const gguf::GgufTensorInfo*>>>
MatchWeights(const gguf::GgufFile& file, const LlamaModel& model) {
  std::vector<std::pair<Tensor*, const gguf::GgufTensorInfo*>> out;
  for (Tensor* t : model.Weights()) {
    std::vector<int64_t> ne(t->ne.begin(), t->ne.end());
    FERRY_ASSIGN_OR_RETURN(const gguf::GgufTensorInfo* info,
                           MatchTensor(file, t->name, ne));
    out.emplace_back(t, info);
  }
  return out;
}

// Whether `device` computes what the model asks of weight `name`, of
// `dtype` and ggml dims `dims`: mul_mat for every matrix, get_rows too for
// the token embedding. Asked of the device with nodes that have no memory.
bool DeviceComputesOn(const Device& device, const std::string& name,
                      DType dtype, const std::vector<int64_t>& dims) {
  Context ctx;
  const int64_t k = dims[0];
  const int64_t rows = dims.size() > 1 ? dims[1] : 1;
  absl::StatusOr<Tensor*> w = ctx.NewTensor(dtype, {k, rows}, name);
  absl::StatusOr<Tensor*> x = ctx.NewTensor(DType::kF32, {k, 1}, "x");
  absl::StatusOr<Tensor*> ids = ctx.NewTensor(DType::kI32, {1}, "ids");
  if (!w.ok() || !x.ok() || !ids.ok()) return false;
  absl::StatusOr<Tensor*> product = MulMat(ctx, *w, *x);
  if (!product.ok() || !device.SupportsOp(**product)) return false;
  if (name != "tok_embd") return true;
  absl::StatusOr<Tensor*> rows_of = GetRows(ctx, *w, *ids);
  return rows_of.ok() && device.SupportsOp(**rows_of);
}

// The default weight_dtype: the file's block type where the device holding
// the weight computes on it, else f32.
DType FileTypeWhereSupported(const gguf::GgufFile& file,
                             const std::string& name, const Device& device) {
  const gguf::GgufTensorInfo* info = file.FindTensor(GgufTensorName(name));
  if (info == nullptr) return DType::kF32;  // MatchWeights reports it.
  absl::StatusOr<DType> dtype = quant::DTypeOf(info->type);
  if (!dtype.ok() || !IsQuantized(*dtype)) return DType::kF32;
  return DeviceComputesOn(device, name, *dtype, info->dims) ? *dtype
                                                            : DType::kF32;
}

// Converts the file's rows of weight `info` (at `raw`) into `t`'s dtype in
// `out`: a copy when the types agree, else dequantized to f32 and, for
// another non-f32 type, quantized again.
absl::Status ConvertWeight(const gguf::GgufFile& file,
                           const gguf::GgufTensorInfo& info,
                           const std::vector<std::byte>& raw, const Tensor& t,
                           std::vector<std::byte>& out) {
  const quant::QuantType want = quant::QuantTypeOf(t.dtype);
  const int64_t row = info.dims[0];
  const int64_t rows = info.num_rows();
  const int64_t out_row_bytes = quant::RowBytes(want, row);
  out.resize(static_cast<size_t>(out_row_bytes * rows));
  if (want == info.type) {
    std::copy(raw.begin(), raw.end(), out.begin());
    return absl::OkStatus();
  }
  if (!quant::CanQuantize(want)) {
    return file.Error(absl::StatusCode::kUnimplemented,
                      absl::StrCat("tensor '", info.name, "' cannot load as ",
                                   DTypeName(t.dtype)));
  }
  const int64_t row_bytes = quant::RowBytes(info.type, row);
  std::vector<float> values(static_cast<size_t>(row));
  for (int64_t r = 0; r < rows; ++r) {
    absl::Status s = quant::DequantizeRow(info.type, raw.data() + r * row_bytes,
                                          values.data(), row);
    if (s.ok()) {
      s = quant::QuantizeRow(want, values.data(),
                             out.data() + r * out_row_bytes, row);
    }
    if (!s.ok()) {
      return file.Error(s.code(), absl::StrCat("tensor '", info.name, "' row ",
                                               r, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

DType F32Weights(const std::string&, const Device&) { return DType::kF32; }

std::string GgufTensorName(const std::string& canonical) {
  if (canonical == "tok_embd") return "token_embd.weight";
  // One tensor serves every layer's copy.
  if (absl::EndsWith(canonical, ".rope_freqs")) return "rope_freqs.weight";
  if (absl::EndsWith(canonical, ".bias")) return canonical;
  return canonical + ".weight";
}

absl::StatusOr<LlamaConfig> LlamaConfigFromGguf(const gguf::GgufFile& file,
                                                int64_t n_ctx) {
  FERRY_ASSIGN_OR_RETURN(gguf::LlamaHParams hp, gguf::ReadLlamaHParams(file));
  if (hp.n_rot != hp.head_dim()) {
    return file.Error(
        absl::StatusCode::kUnimplemented,
        absl::StrCat("llama.rope.dimension_count is ", hp.n_rot,
                     "; ferry ropes whole heads (", hp.head_dim(), ")"));
  }
  if (hp.rope_freq_scale != 1.0f) {
    return file.Error(absl::StatusCode::kUnimplemented,
                      "linear rope scaling is not supported yet");
  }
  if (n_ctx < 0) {
    return file.Error(absl::StatusCode::kInvalidArgument,
                      absl::StrCat("n_ctx ", n_ctx, " is negative"));
  }
  LlamaConfig c;
  if (absl::Status s = ApplyFamily(hp.arch, c); !s.ok()) {
    return file.Error(s.code(), s.message());
  }
  c.n_layer = static_cast<int>(hp.n_layer);
  c.n_embd = hp.n_embd;
  c.n_head = hp.n_head;
  c.n_head_kv = hp.n_head_kv;
  c.n_ff = hp.n_ff;
  c.n_vocab = hp.n_vocab;
  c.n_ctx = n_ctx > 0 ? n_ctx : std::min(hp.n_ctx_train, kDefaultMaxCtx);
  c.eps = hp.rms_norm_eps;
  c.rope_freq_base = hp.rope_freq_base;
  // GGUF's converter permutes Q and K of llama for llama.cpp's normal rope;
  // the other families keep Hugging Face's halves (neox).
  c.rope_mode = hp.arch == "llama" ? RopeMode::kNormal : RopeMode::kNeox;
  c.tie_embeddings = hp.tied_embeddings;
  c.n_embd_head = hp.n_embd_head;
  c.attn_softcap = hp.attn_softcap;
  c.final_softcap = hp.final_softcap;
  c.rope_freq_factors = file.FindTensor("rope_freqs.weight") != nullptr;
  if (hp.arch == "gemma2") {
    c.sliding_window = hp.sliding_window;
  } else if (hp.sliding_window > 0 && c.n_ctx > hp.sliding_window) {
    // Phi-3 slides every layer: within the window that is no limit.
    if (n_ctx > 0) {
      return file.Error(
          absl::StatusCode::kUnimplemented,
          absl::StrCat("n_ctx ", n_ctx, " exceeds ", hp.arch,
                       "'s sliding window of ", hp.sliding_window));
    }
    c.n_ctx = hp.sliding_window;
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return file.Error(s.code(), s.message());
  }
  // Every weight, checked before the caller allocates.
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> unplaced,
                         LlamaModel::CreateUnplaced(c));
  FERRY_RETURN_IF_ERROR(MatchWeights(file, *unplaced).status());
  return c;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaGguf(
    const std::string& path, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, int64_t n_ctx,
    GgufLoadStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufTensorReader> reader,
                         gguf::GgufTensorReader::Open(path));
  const gguf::GgufFile& file = reader->gguf();
  FERRY_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromGguf(file, n_ctx));
  LlamaModelOptions placed = options;
  if (!placed.weight_dtype) {
    placed.weight_dtype = [&file](const std::string& name,
                                  const Device& device) {
      return FileTypeWhereSupported(file, name, device);
    };
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                         LlamaModel::Create(config, backends, placed));
  FERRY_ASSIGN_OR_RETURN(auto weights, MatchWeights(file, *model));

  // The file's bytes of every weight, read in one batch of io_uring reads
  // (at most the file's size, which the parser bounded), then converted a
  // tensor at a time into a staging block and copied to its buffer.
  std::vector<std::vector<std::byte>> raw(weights.size());
  std::vector<gguf::TensorDestination> reads;
  GgufLoadStats local;
  for (size_t i = 0; i < weights.size(); ++i) {
    raw[i].resize(weights[i].second->size);
    reads.push_back({weights[i].second, absl::MakeSpan(raw[i])});
    local.file_bytes += static_cast<int64_t>(weights[i].second->size);
  }
  FERRY_RETURN_IF_ERROR(SyncWait(reader->ReadTensors(io, reads)));
  std::vector<std::byte> converted;
  for (size_t i = 0; i < weights.size(); ++i) {
    auto [t, info] = weights[i];
    FERRY_RETURN_IF_ERROR(ConvertWeight(file, *info, raw[i], *t, converted));
    raw[i] = {};  // Frees the file bytes as we go.
    FERRY_RETURN_IF_ERROR(
        SetTensorData(*t, converted.data(), 0, converted.size()));
    local.weight_bytes += static_cast<int64_t>(converted.size());
  }
  local.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (stats != nullptr) *stats = local;
  return model;
}

}  // namespace ferry::llama
