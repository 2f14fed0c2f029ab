#include "ferry/backends/cuda/cuda_event_pool.h"

#include "ferry/backends/cuda/cuda_status.h"

namespace ferry {

PooledCudaEvent::~PooledCudaEvent() { pool_->Release(event_); }

int PooledCudaEvent::ordinal() const { return pool_->ordinal(); }

CudaEventPool::~CudaEventPool() {
  int current = -1;
  const bool switch_device =
      cudaGetDevice(&current) == cudaSuccess && current != ordinal_;
  if (switch_device) (void)cudaSetDevice(ordinal_);
  for (cudaEvent_t event : free_) (void)cudaEventDestroy(event);
  if (switch_device) (void)cudaSetDevice(current);
  (void)cudaGetLastError();
}

absl::StatusOr<std::shared_ptr<PooledCudaEvent>> CudaEventPool::Acquire() {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      event = free_.back();
      free_.pop_back();
    }
  }
  if (event == nullptr) {
    const cudaError_t error =
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaToStatus(error, "cudaEventCreateWithFlags");
    }
  }
  return std::make_shared<PooledCudaEvent>(shared_from_this(), event);
}

void CudaEventPool::Release(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

}  // namespace ferry
