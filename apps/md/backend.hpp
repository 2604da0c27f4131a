// halox-md's back ends: the driver (halox_md.cpp) owns the decomposition and the neighbour
// search on the host; a back end owns the per-step arrays and runs the per-atom physics.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "halox/error.hpp"
#include "halox/exchange.hpp"

namespace halox::md {

/// Where a neighbour search's fetch puts one rank's home coordinates and the indices
/// (ascending) of its home atoms now outside the domain of its last load's plan.
struct Fetched {
  std::vector<double>* x;
  std::vector<std::int32_t>* leaving;
};

/// One rank's part of a neighbour search's load (Backend::load's arguments).
struct LoadInput {
  const std::vector<double>* x;
  const ParticlePlan* plan;
};

/// How a migration rewrites a rank's home rows in place, so that only the atoms that move
/// are copied: arrived atoms take the places of those that left (the lowest first); holes
/// left over take atoms from the end; arrived atoms left over go after the end.
struct HomeRefill {
  std::vector<std::int32_t> arrival_rows;                    // per arrived atom, in order: its row
  std::vector<std::pair<std::int32_t, std::int32_t>> moves;  // (from, to): a last atom into a hole
  std::size_t rows = 0;                                      // home atoms after the migration
};

/// The refill of `rows` home rows where rows `leaving` (ascending) left and `arrived` atoms
/// came.
HomeRefill refill_home(std::size_t rows, std::span<const std::int32_t> leaving,
                       std::size_t arrived);

struct Sums {
  double energy = 0;  // potential energy
  double virial = 0;  // sum over pairs of r . F
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual BasicKind real() const = 0;
  /// After a neighbour search: all local coordinates (home then halo, as the plan built
  /// them); the back end builds its neighbour list (pairs within `rlist` that this rank
  /// owns, see plan.hpp) where its arrays live. The velocities are those of the home set
  /// as refill_velocities left it.
  virtual void load(const std::vector<double>& x, const ParticlePlan& plan, double rlist) = 0;
  /// Dynamic pruning: each row keeps its pairs within `rinner`, the list forces() walks until
  /// the next load (which walks the whole list again). First takes the largest squared
  /// displacement of a home atom since the previous prune (or load) into a running maximum.
  virtual void prune(double rinner) = 0;
  /// After fetch: the running maximum of the displacements between prunes, the last one up
  /// to this fetch included; then restarts it (the pruned list's validity).
  virtual double pruned_displacement2() = 0;
  virtual void half_kick(double dt) = 0;
  /// A half kick then a drift: the first half of a step. `ends_last_step`: first the half
  /// kick that ends the step before (deferred to this launch: one launch fewer per step).
  virtual void kick_drift(double dt, bool ends_last_step) = 0;
  /// Forces on every local atom from the list (queued on the GPU); `energy_shift` is added
  /// to each pair's energy inside the cutoff (lj.hpp). `sums`: also the energy and virial
  /// (the steps that report them; the others skip their reductions).
  virtual void forces(double cutoff, double energy_shift, bool sums) = 0;
  /// This rank's energy and virial from the last forces() call (waits for it); halox::Error
  /// when that call did not compute them.
  virtual Sums last_sums() = 0;
  /// Sum of v^2 over home atoms.
  virtual double velocity_squared() = 0;
  /// Home coordinates back on the host (neighbour search) and the atoms that left the
  /// domain; returns the largest squared displacement of a home atom since the last load()
  /// (the list's validity). The velocities stay with the back end: a search needs only
  /// those of the atoms that leave (velocities_of).
  virtual double fetch(const Fetched& into) = 0;
  /// Appends the velocities of home atoms `which` (3 each) to v; after fetch.
  virtual void velocities_of(std::span<const std::int32_t> which, std::vector<double>& v) = 0;
  /// A new home set after a migration (HomeRefill): the arrived atoms' velocities are
  /// `arrived` (3 each). The next load() puts it in place.
  virtual void refill_velocities(const HomeRefill& refill, std::span<const double> arrived) = 0;
  virtual void fetch_forces(std::vector<double>& f) = 0;
  /// Every local atom's coordinates and forces where the back end keeps them (host or
  /// device memory, 3 reals per atom): what the halo exchange moves in place.
  virtual void* coordinates() = 0;
  virtual void* force_array() = 0;
  /// The stream the back end's work is ordered on (nullptr on the CPU).
  virtual GpuStream stream() { return nullptr; }
  /// Waits for queued work.
  virtual void synchronize() = 0;
  /// --graph: the work queued on this back end's stream between begin_capture and
  /// end_capture(k) becomes graph k (captured again: updated in place where it can be),
  /// which replay(k) queues again; abandon_capture ends a capture that failed. GPU only.
  virtual void begin_capture() {
    throw Error("halox-md: --graph captures CUDA graphs: it needs --device gpu");
  }
  virtual void end_capture(int k) { (void)k; }
  virtual void abandon_capture() {}
  virtual void replay(int k) { (void)k; }
  /// Captures that updated a graph in place, and that instantiated one.
  virtual std::pair<long, long> graph_counts() const { return {0, 0}; }
  /// The phases of every rank of this process (`ranks`: back ends of this one's kind,
  /// sharing its stream, this one first), each in one launch on the GPU: a grid over a table
  /// of the ranks' arrays instead of a launch per rank (launches, not the work, bound a step
  /// of many small ranks). The CPU runs them rank by rank.
  /// load() for every rank (inputs[k] for ranks[k]), running `meanwhile` (host work that
  /// needs no list) once they are under way: on the GPU every rank's list build is queued,
  /// then `meanwhile` runs while the GPU builds them, then the one host wait they need (their
  /// longest rows), not one wait per rank.
  virtual void load_ranks(std::span<Backend* const> ranks, std::span<const LoadInput> inputs,
                          double rlist, const std::function<void()>& meanwhile) {
    for (std::size_t k = 0; k < ranks.size(); ++k)
      ranks[k]->load(*inputs[k].x, *inputs[k].plan, rlist);
    meanwhile();
  }
  /// fetch() for every rank (into[k]), the largest of their displacements: on the GPU
  /// one host wait for all.
  virtual double fetch_ranks(std::span<Backend* const> ranks, std::span<const Fetched> into) {
    double most = 0;
    for (std::size_t k = 0; k < ranks.size(); ++k) most = std::max(most, ranks[k]->fetch(into[k]));
    return most;
  }
  virtual void prune_ranks(std::span<Backend* const> ranks, double rinner) {
    for (Backend* b : ranks) b->prune(rinner);
  }
  virtual void half_kick_ranks(std::span<Backend* const> ranks, double dt) {
    for (Backend* b : ranks) b->half_kick(dt);
  }
  virtual void kick_drift_ranks(std::span<Backend* const> ranks, double dt, bool ends_last_step) {
    for (Backend* b : ranks) b->kick_drift(dt, ends_last_step);
  }
  virtual void forces_ranks(std::span<Backend* const> ranks, double cutoff, double energy_shift,
                            bool sums) {
    for (Backend* b : ranks) b->forces(cutoff, energy_shift, sums);
  }
  /// Runs `work` and returns its seconds: host clock on the CPU; on the GPU the span between
  /// events recorded around it on the back end's stream (a transport's host-side waits fall
  /// inside that span, the host's own synchronisation latency does not). Waits at the end.
  virtual double timed(const std::function<void()>& work) {
    const auto start = std::chrono::steady_clock::now();
    work();
    synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  /// Runs `work` and adds its seconds to *slot (and to *also, when given) once they are
  /// known: on the CPU at once; on the GPU from events around it on the stream, read by
  /// collect_times once the GPU has passed them, so that timing a phase waits for nothing.
  /// `follows`: nothing went onto the stream since the last timed phase ended, whose end is
  /// then this one's start.
  virtual void time_async(const std::function<void()>& work, double* slot, double* also,
                          bool follows) {
    (void)follows;
    const double seconds = timed(work);
    *slot += seconds;
    if (also != nullptr) *also += seconds;
  }
  /// Adds the seconds of the timed phases the GPU has passed (`wait`: of all of them).
  virtual void collect_times(bool wait) { (void)wait; }
};

/// Applies `refill` to rows of `Width` values; `arrived(a, c)` is column c of arrived atom a.
/// `rows` holds at least max(refill.rows, the rows before) rows.
template <int Width, class T, class Arrived>
void refill_rows(T* rows, const HomeRefill& refill, Arrived&& arrived) {
  for (const auto& [from, to] : refill.moves)
    std::copy(rows + Width * from, rows + Width * from + Width, rows + Width * to);
  for (std::size_t a = 0; a < refill.arrival_rows.size(); ++a) {
    T* row = rows + Width * static_cast<std::size_t>(refill.arrival_rows[a]);
    for (int c = 0; c < Width; ++c) row[c] = static_cast<T>(arrived(a, c));
  }
}

/// Velocity rows (3 per atom) refilled with `arrived`'s (3 per arrived atom).
template <class T>
void refill_velocity_rows(T* rows, const HomeRefill& refill, std::span<const double> arrived) {
  refill_rows<3>(rows, refill, [&](std::size_t a, int c) { return arrived[3 * a + c]; });
}

/// The cell grid of a neighbour search for `plan` with list radius `rlist`.
struct CellGrid;
CellGrid make_cell_grid(const ParticlePlan& plan, double rlist);
/// plan.home_axes of every local atom into axes[0, plan.total_count) (x: home then halo
/// coordinates, as load() gets them): every axis for a home atom, which lies in the domain.
void home_axes_of(const ParticlePlan& plan, const std::vector<double>& x, std::uint8_t* axes);

std::unique_ptr<Backend> make_cpu_backend(bool single_precision);
/// Throws halox::Error when halox-md was built without CUDA or no GPU is visible.
/// `shared`: order the back end's work on this stream (several ranks of one process, one
/// stream: the local engine's exchange follows all of their kernels) instead of its own.
std::unique_ptr<Backend> make_gpu_backend(bool single_precision, GpuStream shared = nullptr);
bool gpu_present();

}  // namespace halox::md
