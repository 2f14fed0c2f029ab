// safetensors weights for the example llama: a writer of random weights (so
// the demo works offline) and a loader that reads through the io_uring
// reactor straight into the model's backend buffers.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"n_layer": "4", ...},
//    "blk.0.attn_q": {"dtype": "F32", "shape": [256, 256],
//                     "data_offsets": [begin, end]}, ...}
// then the tensors' bytes (offsets relative to the end of the header).
// Shapes are outermost first (reversed ggml ne). Only F32 tensors are
// loaded; the metadata holds the LlamaConfig.
#ifndef FERRY_EXAMPLES_SAFETENSORS_H_
#define FERRY_EXAMPLES_SAFETENSORS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ferry/backends/backend.h"
#include "ferry/models/llama/llama_model.h"
#include "ferry/runtime/io_reactor.h"

namespace ferry::examples {

using ::ferry::llama::LlamaConfig;
using ::ferry::llama::LlamaModel;
using ::ferry::llama::LlamaModelOptions;

// Writes a file with the weights of `config` as FillRandom(seed) makes them.
absl::Status WriteRandomWeights(const std::string& path,
                                const LlamaConfig& config, uint64_t seed);

// Reads the config stored in the metadata of the file at `path`.
absl::StatusOr<LlamaConfig> ReadSafetensorsConfig(const std::string& path);

struct LoadOptions {
  // Clock of the "disk" trace spans (nanoseconds); default: the steady clock.
  // Pass a simulated device's ModelNowNanos to line them up with its spans.
  std::function<int64_t()> now;
};

struct LoadStats {
  int64_t bytes = 0;         // Bytes read from disk.
  int64_t staged_bytes = 0;  // Of those, bytes that went through staging.
  double seconds = 0;
};

// Creates the model for the config in the file's metadata and loads every
// weight: host buffers are read into directly; other buffers through
// pinned staging buffers (the device's host_buffer_type), with the next
// chunk's disk read overlapping the previous chunk's host-to-device copy.
// On any error (truncated or corrupt file, oversized header, missing
// tensor, wrong dtype or shape) returns a status naming the file and the
// tensor, and nothing stays allocated. Disk reads are traced on "disk".
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadLlamaModel(
    const std::string& path, std::vector<Backend*> backends,
    const LlamaModelOptions& options, IoReactor& io, LoadStats* stats = nullptr,
    const LoadOptions& load_options = {});

}  // namespace ferry::examples

#endif  // FERRY_EXAMPLES_SAFETENSORS_H_
