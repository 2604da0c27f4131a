// The mini-apps' last line against hangs: halox's exchange waits end in a time-out naming the
// peer, but a rank can also wait in a collective (a reduction of thermo output, a plan
// builder's agreement) for a rank that stalled or died. A watchdog thread ends such a process
// with a message and a non-zero exit when the main loop makes no progress for its limit.
// It watches from MPI_Init on: the start-up (the input check, the set-up's collectives, the
// first plan) gets kSetupSeconds, each step --watchdog seconds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace halox::apps {

constexpr double kSetupSeconds = 300;  // start-up and set-up: lattice, plans, NVSHMEM init

class Watchdog {
 public:
  /// Watches from here: `phase` (a string literal) names where the main loop is, `seconds`
  /// (<= 0: not watched) how long it may stay there without a beat.
  Watchdog(const char* program, int rank, const char* phase, double seconds)
      : m_program(program), m_rank(rank) {
    beat(phase, seconds);
    m_thread = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    m_stop = true;
    if (m_thread.joinable()) m_thread.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// The main loop made progress and is now in `phase`, with `seconds` to make the next.
  void beat(const char* phase, double seconds) {
    m_seconds.store(seconds, std::memory_order_relaxed);
    beat(phase);
  }
  void beat(const char* phase) {
    m_phase.store(phase, std::memory_order_relaxed);
    m_last.store(now(), std::memory_order_release);
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void watch() {
    while (!m_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double limit = m_seconds.load(std::memory_order_relaxed);
      const double quiet = now() - m_last.load(std::memory_order_acquire);
      // Ranks that wait for the same stalled one fire one after another, not at once: Open
      // MPI 4.1's mpiexec can deadlock in its PMIx server's teardown when several ranks leave
      // a collective of MPI_Finalize in the same instant; the first exit makes it end the rest.
      const double stagger = 0.5 * (m_rank % 8);
      if (limit > 0 && quiet > limit + stagger) {
        const char* phase = m_phase.load(std::memory_order_relaxed);
        std::fprintf(stderr,
                     "%s: rank %d: no progress for %.0f s (in %s, whose limit is %.0f s): a rank "
                     "this one waits for is stalled or dead; ending the job (--watchdog sets a "
                     "step's limit)\n",
                     m_program, m_rank, quiet, phase, limit);
        std::fflush(stderr);
        std::_Exit(4);  // kExitNoProgress (mpi_main.hpp); no unwinding: it could wait on the
                        // stalled rank again
      }
    }
  }

  const char* m_program;
  int m_rank;
  std::atomic<double> m_seconds{0};
  std::atomic<double> m_last{0};
  std::atomic<const char*> m_phase{"start"};
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

}  // namespace halox::apps
