// halox-lbm's back ends: the same per-cell functions (lattice.hpp) over host arrays or
// device arrays, float or double. Fields are SoA planes with one halo layer.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/error.hpp"
#include "halox/pack_gpu.hpp"
#include "lattice.hpp"

namespace halox::lbm {

/// A box of interior cells [lo, hi) in halo coordinates (interior cells are 1..n).
struct Region {
  std::array<int, 3> lo{}, hi{};
  long long cells() const {
    long long n = 1;
    for (int a = 0; a < 3; ++a) n *= hi[a] > lo[a] ? hi[a] - lo[a] : 0;
    return n;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual BasicKind real() const = 0;
  virtual bool on_device() const = 0;
  /// Allocates two copies of f (and of g when multiphase) and phi for an interior of n; the
  /// updates wrap around the axes marked in `wrap` (periodic axes this rank spans alone).
  virtual void allocate(std::array<int, 3> n, bool multiphase, std::array<bool, 3> wrap) = 0;
  /// Elements from one row of a plane to the next (>= n[0] + 2), set by allocate().
  virtual int row_pitch() const = 0;
  /// Cells along x that share one memory transaction (interior rows start on one): regions
  /// whose x ends sit on it update whole transactions.
  virtual int row_alignment() const { return 1; }
  /// Sets every interior cell's populations (double, interleaved per cell: 19 f then 7 g).
  virtual void upload(const std::vector<double>& cells) = 0;
  /// The current copies of every interior cell: rho, ux, uy, uz, phi (double).
  virtual std::vector<double> download_moments() = 0;
  /// Device or host base pointers of the current copies (what the exchanges move).
  virtual void* f() = 0;
  virtual void* g() = 0;
  virtual void* phi() = 0;
  /// The cell updates, over disjoint regions (on the GPU in one launch: the overlap shell's
  /// slabs are small, and one launch each left the GPU idle between them); `side`: on a
  /// second stream (GPU), for the overlap variant, between fork() and join().
  using Regions = std::span<const Region>;
  virtual void bgk_step(double omega, Regions r, bool side = false) = 0;  // fused pull + collide
  virtual void update_phi(Regions r, bool side = false) = 0;  // multiphase: from pulled g
  virtual void stream_collide(const Params& p, Regions r, bool side = false) = 0;  // after phi
  /// The work queued between a begin and its end, on the main or side stream, as the span
  /// `name` of `rank` on the event log (GPU, while it records: trace::stream_span_begin).
  virtual void trace_span(const char* name, int rank, bool begin, bool side) {
    (void)name, (void)rank, (void)begin, (void)side;
  }
  /// Side stream waits for the work queued so far; join: the main stream waits for the side.
  virtual void fork() {}
  virtual void join() {}
  /// Several ranks in one process: this back end's stream waits (on the device, through an
  /// event) for the work queued so far on `other`'s. Host back ends run in call order.
  virtual void wait_for(Backend& other) { (void)other; }
  virtual void swap() = 0;
  /// --graph: the work queued on this back end's stream, and on the streams that wait for
  /// it, between begin_capture and end_capture(k) becomes graph k (0 or 1), which replay(k)
  /// queues again; abandon_capture ends a capture that failed. The GPU back end's only.
  virtual void begin_capture() {
    throw Error("halox-lbm: --graph captures CUDA graphs: it needs --device gpu");
  }
  virtual void end_capture(int k) { (void)k; }
  virtual void abandon_capture() {}
  virtual void replay(int k) { (void)k; }
  virtual GpuStream stream_handle() = 0;
  virtual void synchronize() = 0;
  /// Phase timing that does not stall the GPU between phases: mark(k) records point k
  /// (0 <= k < kMarks: two steps of five) in stream order; seconds_between(a, b) waits for
  /// point b and returns the time from a to b. The host back end's points are the host
  /// clock at the call.
  static constexpr int kMarks = 10;
  virtual void mark(int point) { m_marks.at(point) = std::chrono::steady_clock::now(); }
  virtual double seconds_between(int from, int to) {
    return std::chrono::duration<double>(m_marks.at(to) - m_marks.at(from)).count();
  }
  /// The "default" communication variant's hand-written pack: the cells of the box
  /// [lo, hi) (halo coordinates) of the planes `planes` of field 0 (f), 1 (g) or 2 (phi), in
  /// plane-major order, into `out` (device memory for the GPU back end) / back from `in`.
  virtual void pack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                        const std::vector<int>& planes, void* out) = 0;
  virtual void unpack_box(int field, std::array<int, 3> lo, std::array<int, 3> hi,
                          const std::vector<int>& planes, const void* in) = 0;
  /// The copy ceiling (read + write GB/s of a 1 GiB device-to-device copy), measured now;
  /// 0 on the CPU.
  virtual double copy_ceiling_gbs() { return 0; }
  /// Bytes of lattice arrays allocated.
  virtual std::int64_t bytes() const = 0;

 private:
  std::array<std::chrono::steady_clock::time_point, kMarks> m_marks{};
};

std::unique_ptr<Backend> make_cpu_backend(bool single);
std::unique_ptr<Backend> make_gpu_backend(bool single);  // throws without CUDA / GPU

}  // namespace halox::lbm
