// A host program through libhalox_mpi on a machine with a GPU driver: its MPI calls on host
// memory (point-to-point, nonblocking, a collective, random sizes from a printed seed) must
// leave the driver uninitialized (the interposer never calls cuInit; docs/mpi-interposer.md),
// so that a program that never touches a GPU pays no CUDA start-up and gets no driver
// threads. Until 4cbeabd the interposer initialized the driver at the first call. Exit code
// 1 when a value is wrong or the calls initialized the driver, else 0.
#include <dlfcn.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "../common/seed.hpp"

namespace {

constexpr int kNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED

// What the driver says about this process now (cuCtxGetCurrent), or -1 without a driver.
int driver_state() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return -1;
  using Current = int (*)(void**);
  const auto current = reinterpret_cast<Current>(dlsym(lib, "cuCtxGetCurrent"));
  void* context = nullptr;
  return current == nullptr ? -1 : current(&context);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  // The MPI library's own start-up may initialize the driver (a UCX build's CUDA transports):
  // then there is nothing to check.
  const int at_init = driver_state();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0's seed on every rank: the message sizes must agree.
  std::uint64_t seed = rank == 0 ? halox::testing::test_seed("InterposerHostOnly", 0) : 0;
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  std::mt19937_64 rng(seed);
  const int peer = (rank + 1) % size, from = (rank + size - 1) % size;
  int wrong = 0;
  for (int round = 0; round < 20; ++round) {
    const int n = std::uniform_int_distribution<int>(1, 1 << 16)(rng);  // the same on every rank
    std::vector<std::int32_t> out(static_cast<std::size_t>(n)), in(out.size(), -1);
    for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = rank * 1000003 + i + round;
    MPI_Request requests[2];
    MPI_Irecv(in.data(), n, MPI_INT32_T, from, round, MPI_COMM_WORLD, &requests[0]);
    MPI_Isend(out.data(), n, MPI_INT32_T, peer, round, MPI_COMM_WORLD, &requests[1]);
    MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; ++i)
      wrong += in[static_cast<std::size_t>(i)] != from * 1000003 + i + round;
    MPI_Sendrecv_replace(out.data(), n, MPI_INT32_T, peer, round, from, round, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
    wrong += out[0] != from * 1000003 + round;
  }
  int wrong_anywhere = 0;
  MPI_Allreduce(&wrong, &wrong_anywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const int state = driver_state();
  // 0: not initialized now; 1: initialized by the calls above; 2: nothing to check (no driver,
  // or initialized by MPI_Init already). The largest over the ranks is reported.
  const int mine = state < 0 || at_init != kNotInitialized ? 2 : state != kNotInitialized ? 1 : 0;
  int worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("interposer_host_only: %d ranks, seed %llu: %d wrong values; the driver %s\n", size,
                static_cast<unsigned long long>(seed), wrong_anywhere,
                worst == 2   ? "was not there or was initialized by MPI_Init (nothing to check)"
                : worst == 1 ? "was initialized by the calls on some rank (cuCtxGetCurrent did not "
                               "answer 3)"
                             : "is not initialized on any rank");
  }
  MPI_Finalize();
  return wrong_anywhere == 0 && worst != 1 ? 0 : 1;
}
