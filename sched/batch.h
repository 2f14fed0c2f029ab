// BatchIo and CapturedBatch: one batch's host memory, as the scheduler
// takes it. BatchIo names the caller's memory for a batch's inputs and
// outputs; CaptureBatch validates it against the graph and copies the input
// bytes at once (the caller may then overwrite them), which is what lets
// any number of batches be in flight with their own inputs.
#ifndef FERRY_SCHED_BATCH_H_
#define FERRY_SCHED_BATCH_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ferry/graph/graph.h"
#include "ferry/graph/tensor.h"

namespace ferry {

// Host memory bound to one batch's inputs and outputs. Does not own it.
struct BatchIo {
  struct Input {
    const Tensor* tensor = nullptr;  // A leaf of the graph flagged input.
    const void* data = nullptr;      // tensor->NumBytes() bytes, read now.
    size_t size = 0;
  };
  struct Output {
    const Tensor* tensor = nullptr;  // A tensor of the graph flagged output.
    void* data = nullptr;            // Written when the batch completes.
    size_t size = 0;
  };
  std::vector<Input> inputs;
  std::vector<Output> outputs;

  BatchIo& In(const Tensor& tensor, const void* data, size_t size) {
    inputs.push_back({&tensor, data, size});
    return *this;
  }
  BatchIo& Out(const Tensor& tensor, void* data, size_t size) {
    outputs.push_back({&tensor, data, size});
    return *this;
  }
};

// A batch's input bytes, captured, and its outputs. Thread-compatible.
struct CapturedBatch {
  struct Input {
    const Tensor* tensor;  // The input leaf.
    size_t offset;         // Into bytes.
    size_t size;
  };
  // An output downloaded to host staging, copied to the caller's memory
  // when the batch completes.
  struct Staged {
    const char* from;
    void* to;
    size_t size;
  };
  std::vector<char> bytes;
  std::vector<Input> inputs;
  std::vector<BatchIo::Output> outputs;
  std::vector<Staged> staged;  // Filled when the batch is enqueued.

  const Input* Find(const Tensor* leaf) const {
    for (const Input& input : inputs) {
      if (input.tensor == leaf) return &input;
    }
    return nullptr;
  }
};

// Checks `io` against `graph` (inputs: leafs flagged input, of their byte
// size, each once; outputs: tensors of the graph flagged output, of their
// byte size) and copies every input's bytes: from `io`, or, for inputs it
// does not list, from the tensor's own memory (FailedPrecondition if it has
// none). Errors name the tensor.
absl::StatusOr<std::unique_ptr<CapturedBatch>> CaptureBatch(const Graph& graph,
                                                            const BatchIo& io);

}  // namespace ferry

#endif  // FERRY_SCHED_BATCH_H_
