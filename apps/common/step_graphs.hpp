// --graph of the mini-apps (halox-lbm, halox-md): a step's work queued on one stream, the
// work of the streams that wait for it included, captured into CUDA graph k and replayed.
// A later capture of k (a new plan: new sizes, new arrays) updates the instantiated graph in
// place where its shape allows (cudaGraphExecUpdate) and instantiates it anew otherwise.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>

#include "cuda_check.hpp"

namespace halox::apps {

class StepGraphs {
 public:
  explicit StepGraphs(const char* program) : m_program(program) {}
  ~StepGraphs() {
    for (auto& kept : m_exec) cudaGraphExecDestroy(kept.second);
  }
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Global mode, the strictest: a call inside the step that is unsafe during a capture (an
  // allocation, a synchronisation) fails the capture instead of passing unnoticed.
  void begin(cudaStream_t stream) {
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), m_program,
               "cudaStreamBeginCapture");
    m_stream = stream;
  }
  void end(int k) {
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(m_stream, &graph), m_program, "cudaStreamEndCapture");
    const auto kept = m_exec.find(k);
    cudaError_t rc = cudaErrorGraphExecUpdateFailure;
    if (kept != m_exec.end()) {
      cudaGraphExecUpdateResultInfo info{};
      rc = cudaGraphExecUpdate(kept->second, graph, &info);
      if (rc == cudaSuccess) {
        ++m_updated;
      } else {
        cudaGetLastError();
        cudaGraphExecDestroy(kept->second);
        m_exec.erase(kept);
      }
    }
    if (rc != cudaSuccess) {
      cudaGraphExec_t exec = nullptr;
      rc = cudaGraphInstantiate(&exec, graph, 0);
      if (rc == cudaSuccess) {
        m_exec[k] = exec;
        ++m_instantiated;
      }
    }
    cudaGraphDestroy(graph);
    check_cuda(rc, m_program, "cudaGraphInstantiate");
  }
  /// Ends a capture that failed (its error is the caller's to report).
  void abandon() {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(m_stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  void replay(int k, cudaStream_t stream) {
    check_cuda(cudaGraphLaunch(m_exec.at(k), stream), m_program, "cudaGraphLaunch");
  }
  /// Captures that updated a graph in place, and that instantiated one.
  long updated() const { return m_updated; }
  long instantiated() const { return m_instantiated; }

 private:
  const char* m_program;
  cudaStream_t m_stream = nullptr;
  std::map<int, cudaGraphExec_t> m_exec;
  long m_updated = 0, m_instantiated = 0;
};

}  // namespace halox::apps
