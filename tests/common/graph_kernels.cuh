// Kernels of the CUDA-graph tests (tests/gpu/test_graph.cu: ranks in one process;
// tests/mpi/test_graph_peers.cu: processes): a graph of fill + exchange + check + count, so
// that each replay moves new data, set and checked on the device, and the host needs no
// call of its own between replays.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace halox::testing {

/// One rank's array (interior + 2 * halo cells along each axis, x fastest) and where its
/// interior starts in the periodic global grid.
struct GraphRank {
  double* field;
  long long offset[3];
  long long interior[3];
};

struct GraphGrid {
  long long global[3];
  int halo;
};

__device__ inline double replay_value(long long x, long long y, long long z,
                                      unsigned long long replay) {
  return 1.0 + x + 1000.0 * y + 1.0e6 * z + static_cast<double>(replay);  // exact in double
}

// Cell k of rank r's array: its global position (periodic wrap) and whether it is interior.
__device__ inline void global_of(const GraphRank& r, const GraphGrid& g, long long k, long long* at,
                                 bool* inside) {
  const long long sx = r.interior[0] + 2 * g.halo, sy = r.interior[1] + 2 * g.halo;
  const long long c[3] = {k % sx, (k / sx) % sy, k / (sx * sy)};
  *inside = true;
  for (int a = 0; a < 3; ++a) {
    const long long local = c[a] - g.halo;
    if (local < 0 || local >= r.interior[a]) *inside = false;
    at[a] = ((r.offset[a] + local) % g.global[a] + g.global[a]) % g.global[a];
  }
}

__device__ inline long long cells_of(const GraphRank& r, const GraphGrid& g) {
  return (r.interior[0] + 2 * g.halo) * (r.interior[1] + 2 * g.halo) * (r.interior[2] + 2 * g.halo);
}

// Calls visit(cell, value, inside) for each cell of rank blockIdx.y's array (grid-stride):
// the global field of this replay at the cell's wrapped position, and whether it is interior.
template <class Visit>
__device__ void for_each_cell(const GraphRank* ranks, const GraphGrid& g, unsigned long long n,
                              Visit&& visit) {
  const GraphRank r = ranks[blockIdx.y];
  for (long long k = blockIdx.x * blockDim.x + threadIdx.x; k < cells_of(r, g);
       k += gridDim.x * blockDim.x) {
    long long at[3];
    bool inside = false;
    global_of(r, g, k, at, &inside);
    visit(r.field + k, replay_value(at[0], at[1], at[2], n), inside);
  }
}

/// Interiors get this replay's values, halos NaN (a cell the exchange misses is caught).
__global__ void fill_replay(const GraphRank* ranks, GraphGrid g, const unsigned long long* replay) {
  for_each_cell(ranks, g, *replay,
                [](double* cell, double value, bool inside) { *cell = inside ? value : nan(""); });
}

/// Every cell, halo included, against the global field of this replay.
__global__ void check_replay(const GraphRank* ranks, GraphGrid g, const unsigned long long* replay,
                             unsigned long long* wrong) {
  for_each_cell(ranks, g, *replay, [&](double* cell, double value, bool) {
    if (*cell != value) atomicAdd(wrong, 1ull);
  });
}

__global__ void next_replay(unsigned long long* replay) {
  ++*replay;
}

#define HALOX_GRAPH_CUDA(call)                                                       \
  do {                                                                               \
    const cudaError_t rc_ = (call);                                                  \
    if (rc_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(rc_)); \
  } while (0)

struct ReplayCount {
  unsigned long long wrong = 0;    // cells that differed, over every replay
  unsigned long long replays = 0;  // the device's count: replays that ran
};

/// Captures fill + `exchange(stream)` + check + count on `stream` in `mode`, then replays the
/// graph `replays` times, calling `between()` (the application's check) every 500 replays.
/// The exchange must have run once outside the capture (its set-up).
template <class Exchange, class Between>
ReplayCount replay_checked(const std::vector<GraphRank>& ranks, GraphGrid grid, cudaStream_t stream,
                           cudaStreamCaptureMode mode, int replays, Exchange&& exchange,
                           Between&& between) {
  GraphRank* on_device = nullptr;
  unsigned long long* counts = nullptr;  // [0] replay, [1] wrong cells
  HALOX_GRAPH_CUDA(cudaMalloc(&on_device, ranks.size() * sizeof(GraphRank)));
  HALOX_GRAPH_CUDA(cudaMalloc(&counts, 2 * sizeof(unsigned long long)));
  HALOX_GRAPH_CUDA(cudaMemcpy(on_device, ranks.data(), ranks.size() * sizeof(GraphRank),
                              cudaMemcpyHostToDevice));
  HALOX_GRAPH_CUDA(cudaMemset(counts, 0, 2 * sizeof(unsigned long long)));
  const dim3 blocks(64, static_cast<unsigned>(ranks.size()));
  cudaGraph_t graph = nullptr;
  HALOX_GRAPH_CUDA(cudaStreamBeginCapture(stream, mode));
  fill_replay<<<blocks, 256, 0, stream>>>(on_device, grid, counts);
  try {
    exchange(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check_replay<<<blocks, 256, 0, stream>>>(on_device, grid, counts, counts + 1);
  next_replay<<<1, 1, 0, stream>>>(counts);
  HALOX_GRAPH_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  HALOX_GRAPH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; ++i) {
    HALOX_GRAPH_CUDA(cudaGraphLaunch(exec, stream));
    if ((i + 1) % 500 == 0) {
      HALOX_GRAPH_CUDA(cudaStreamSynchronize(stream));
      between();
    }
  }
  HALOX_GRAPH_CUDA(cudaStreamSynchronize(stream));
  between();
  ReplayCount out;
  unsigned long long host[2] = {};
  HALOX_GRAPH_CUDA(cudaMemcpy(host, counts, sizeof host, cudaMemcpyDeviceToHost));
  out.replays = host[0];
  out.wrong = host[1];
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(on_device);
  cudaFree(counts);
  return out;
}

}  // namespace halox::testing
