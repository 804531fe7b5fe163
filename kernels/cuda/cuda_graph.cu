// CudaBackend::Capture and the Graph it returns: stream capture on the backend's private
// capture stream, instantiated once, replayed with cudaGraphLaunch on the backend's stream.
#include <cstdio>
#include <memory>

#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {
namespace {

class CudaGraph final : public Graph {
 public:
  // Takes ownership of exec.
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool Replay() override {
    const cudaError_t status = cudaGraphLaunch(exec_, stream_);
    if (status == cudaSuccess) return true;
    std::fprintf(stderr, "kvserve CUDA graph replay failed: %s\n", cudaGetErrorString(status));
    return false;
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<Graph> CudaBackend::Capture(const std::function<void()>& record) {
  if (!first_error_.empty()) return nullptr;  // a failed backend: let the caller see the error
  // The launchers enqueue on stream_ and cuBLAS on its bound stream; point both at the capture
  // stream while recording. The legacy default stream cannot be captured, hence a private one.
  const cudaStream_t eager_stream = stream_;
  const char* failure = nullptr;
  cudaError_t status = cudaSuccess;
  cudaGraph_t graph = nullptr;
  if (!BindCublas(capture_stream_)) {
    failure = "cuBLAS could not be bound to the capture stream";
  } else if ((status = cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal)) !=
             cudaSuccess) {
    failure = "cudaStreamBeginCapture";
  } else {
    stream_ = capture_stream_;
    record();
    stream_ = eager_stream;
    // Always ends the capture, also after an error inside record (then graph is null).
    status = cudaStreamEndCapture(capture_stream_, &graph);
    if (status != cudaSuccess) failure = "cudaStreamEndCapture";
  }
  stream_ = eager_stream;
  if (!BindCublas(eager_stream) && failure == nullptr) {
    failure = "cuBLAS could not be bound back to the stream";
  }
  if (failure == nullptr && !first_error_.empty()) failure = first_error_.c_str();

  cudaGraphExec_t exec = nullptr;
  if (failure == nullptr && (status = cudaGraphInstantiate(&exec, graph, 0)) != cudaSuccess) {
    failure = "cudaGraphInstantiate";
    exec = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (failure == nullptr) return std::make_unique<CudaGraph>(exec, stream_);

  std::fprintf(stderr, "kvserve CUDA graph capture failed (%s: %s); running eagerly\n", failure,
               cudaGetErrorString(status));
  // Capture errors are not sticky: clear them so the backend carries on as before.
  first_error_.clear();
  cudaGetLastError();
  return nullptr;
}

}  // namespace kvserve::kernels::cuda
