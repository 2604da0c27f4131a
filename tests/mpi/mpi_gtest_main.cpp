// GoogleTest main for MPI tests: every rank runs the tests, and the verdicts are combined so
// that all ranks exit alike (a failure on one rank fails the whole job).
#include <gtest/gtest.h>
#include <mpi.h>

#include "halox/mpi.hpp"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace {
// A rank other than 0 prints only its failures, each naming the rank and the test (without
// it, a failure on those ranks showed only as "FAILED on at least one rank").
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : m_rank(rank) {}
  // The test's name is kept here: UnitTest::current_test_info() from OnTestPartResult waits on
  // the lock GoogleTest holds while it reports (a hang).
  void OnTestStart(const ::testing::TestInfo& test) override {
    m_test = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s: %s:%d: Failure\n%s\n", m_rank, m_test.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int m_rank;
  std::string m_test;
};
}  // namespace

int main(int argc, char** argv) {
  // MPI from several threads: the fused grid kernel's host proxy (host_proxy.hpp).
  // HALOX_TEST_MPI_THREAD_SINGLE=1 asks for what MPI_Init gives (the interposer then asks the
  // driver less per call: its device-memory tests run that way too).
  const char* single = std::getenv("HALOX_TEST_MPI_THREAD_SINGLE");
  const bool want_single = single != nullptr && std::string(single) == "1";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, want_single ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE, &provided);
  halox::select_device(MPI_COMM_WORLD);  // one GPU per rank where there are several
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Only rank 0 prints the full report; other ranks print failures only.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  // Every rank derives its seed from one base seed, drawn on rank 0 unless given.
  unsigned long long base_seed = 0;
  if (const char* env = std::getenv("HALOX_TEST_SEED")) {
    base_seed = std::strtoull(env, nullptr, 10);
  } else {
    base_seed =
        (static_cast<unsigned long long>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  MPI_Bcast(&base_seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  setenv("HALOX_TEST_SEED", std::to_string(base_seed).c_str(), 1);
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed) std::fprintf(stderr, "FAILED on at least one rank\n");
  MPI_Finalize();
  return any_failed;
}
