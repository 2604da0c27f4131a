// Diagnostic (scripts/device/diag/face_words.sh): one 4 MiB z face between 2 ranks in several
// layouts (word sizes 4, 8, 16 bytes), ipc-fused against nvshmem-stream, timed alone (barrier,
// exchange, sync; median of 10) and queued (20 back to back). It found the fused grid kernel
// bound by words in flight (docs/PERFORMANCE.md).
#include <cuda_runtime.h>
#include <mpi.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include "halox/exchange.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"
using namespace halox;
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Topology t = Topology::from_mpi(MPI_COMM_WORLD, {1, 1, 2}, {false, false, false});
  cudaStream_t s;
  cudaStreamCreate(&s);
  struct Case {
    const char* name;
    std::array<std::int64_t, 3> n;
    Datatype e;
    std::int64_t ebytes;
  };
  std::vector<Case> cases = {
      {"float 1024x1024x2 (W=4)", {1024, 1024, 2}, Datatype::of<float>().commit(), 4},
      {"float 1024x256x2 (1 MiB, W=4)", {1024, 256, 2}, Datatype::of<float>().commit(), 4},
      {"float4 256x1024x2 (W=16)",
       {256, 1024, 2},
       Datatype::contiguous(4, Datatype::of<float>()).commit(),
       16},
      {"float2 512x1024x2 (W=8)",
       {512, 1024, 2},
       Datatype::contiguous(2, Datatype::of<float>()).commit(),
       8},
      {"cell 4 MiB 1x1x1 (W=16)",
       {1, 1, 1},
       Datatype::contiguous(4 << 20, Datatype::of<char>()).commit(),
       4 << 20},
  };
  for (auto& c : cases) {
    GridPlan plan = build_grid_plan(t, c.n, 1, c.e);
    std::size_t bytes = (c.n[0] + 2) * (c.n[1] + 2) * (c.n[2] + 2) * c.ebytes;
    void* f;
    cudaMalloc(&f, bytes);
    cudaMemset(f, 1, bytes);
    for (TransportKind k : {TransportKind::ipc_fused, TransportKind::nvshmem_stream}) {
      GridExchange x(t, plan, {k});
      for (int i = 0; i < 3; ++i) x.exchange(f, s);
      cudaStreamSynchronize(s);
      std::vector<double> one;
      for (int r = 0; r < 10; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        auto a = std::chrono::steady_clock::now();
        x.exchange(f, s);
        cudaStreamSynchronize(s);
        one.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(one.begin(), one.end());
      MPI_Barrier(MPI_COMM_WORLD);
      auto a = std::chrono::steady_clock::now();
      for (int r = 0; r < 20; ++r) x.exchange(f, s);
      cudaStreamSynchronize(s);
      double q = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count() / 20;
      if (rank == 0)
        std::printf("%-32s %-15s one %8.1f us  queued %8.1f us\n", c.name,
                    x.transport_name(f).c_str(), one[5] * 1e6, q * 1e6);
    }
    cudaFree(f);
  }
  MPI_Finalize();
}
