// The mini-apps' last line against hangs: halox's exchange waits end in a time-out naming the
// peer, but a rank can also wait in a collective (a reduction of thermo output, a plan
// builder's agreement) for a rank that stalled or died. A watchdog thread ends such a process
// with a message and a non-zero exit when the main loop makes no progress for its limit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace halox::apps {

class Watchdog {
 public:
  /// `seconds` <= 0: off.
  Watchdog(const char* program, int rank, double seconds)
      : m_program(program), m_rank(rank), m_seconds(seconds) {
    beat("start");
    if (seconds > 0) m_thread = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    m_stop = true;
    if (m_thread.joinable()) m_thread.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// The main loop made progress; `phase` (a string literal) names where it is now.
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
      const double quiet = now() - m_last.load(std::memory_order_acquire);
      if (quiet > m_seconds) {
        std::fprintf(stderr,
                     "%s: rank %d: no progress for %.0f s (in %s): a rank this one waits for is "
                     "stalled or dead; ending the job (--watchdog sets the limit)\n",
                     m_program, m_rank, quiet, m_phase.load(std::memory_order_relaxed));
        std::fflush(stderr);
        std::_Exit(4);  // no unwinding: it could wait on the stalled rank again
      }
    }
  }

  const char* m_program;
  int m_rank;
  double m_seconds;
  std::atomic<double> m_last{0};
  std::atomic<const char*> m_phase{"start"};
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

}  // namespace halox::apps
