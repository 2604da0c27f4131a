// halox: halo plans. A plan is pure data: which items go to which neighbour in which pulse,
// built once per neighbour search (particles) or once per run (grids), and used by every
// transport. Pulses run Z, then Y, then X; later pulses forward what earlier ones received,
// so 3 pulse pairs fill faces, edges and corners (6 messages instead of 26). Particle plans
// put the periodic axes that one rank spans (pulses to itself) first.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "halox/topology.hpp"

namespace halox {

class Ranks;  // halox/exchange_options.hpp

/// A periodic simulation box [0, length) per axis, split evenly over the rank grid.
struct Box {
  std::array<double, 3> length = {1.0, 1.0, 1.0};
};

/// The part of the box a rank owns: [lo, hi) per axis.
struct Domain {
  std::array<double, 3> lo{}, hi{};
};
Domain domain_of(const Topology& topology, const Box& box, int rank);

/// One message of a plan seen from this rank: it sends to `send_rank` and receives from
/// `recv_rank` (-1 when there is none: the edge of a non-periodic axis). Pulses with the same
/// `stage` do not depend on each other and may run concurrently.
struct PulseHeader {
  int axis = Z;
  int direction = -1;  ///< -1: sends to the lower neighbour, receives from the upper one
  int index = 0;       ///< k-th pulse along this axis and direction
  int stage = 0;
  int send_rank = -1;
  int recv_rank = -1;
  /// Message sizes: bytes for grid pulses, items for particle pulses.
  std::int64_t send_size = 0;
  std::int64_t recv_size = 0;
  /// "pulse 3 (y-, 2nd)" for error messages.
  std::string name(int number) const;
};

/// A particle pulse (GROMACS's scheme): gather `send_index` items (each `item` of the
/// exchanged array, e.g. 3 coordinates), add `shift` when the message crosses the periodic
/// boundary, and receive `recv_count` items appended at `recv_offset`.
struct ParticlePulse {
  PulseHeader header;
  std::vector<std::int32_t> send_index;
  /// send_index[first_forwarded..] are items received by earlier pulses (indices >=
  /// home_count); the ones before are home items and can be sent at once.
  std::int64_t first_forwarded = 0;
  std::int64_t recv_offset = 0;
  std::int64_t recv_count = 0;
  std::array<double, 3> shift{};  ///< added to the coordinates this rank sends
};

/// The particle halo of one rank: home items [0, home_count), then each pulse's received
/// items in pulse order up to total_count.
///
/// Shell: each rank imports the atoms within `cutoff` above its upper faces only (the
/// region [lo, hi + cutoff) per axis, GROMACS's eighth shell). A pair is computed by the one
/// rank that owns the corner of the pair's bounding box nearest the origin (owns_pair()),
/// which holds both atoms; the forces on imported atoms go back in the reverse pulses. Half
/// the import volume and half the pair work of a full shell, at the price of the reverse
/// (force) communication, which the GPU-initiated transports make cheap.
struct ParticlePlan {
  Box box;
  double cutoff = 0;
  Domain domain;
  std::int64_t home_count = 0;
  std::int64_t total_count = 0;
  std::vector<ParticlePulse> pulses;
  /// Pulses per axis (the cutoff over the domain width, rounded up).
  std::array<int, 3> pulses_per_axis{};
  /// Which pulse delivered item `i` (-1 for home items).
  int pulse_of(std::int64_t i) const;
  /// Bit d (1 << d) set when coordinate d of `position` (this rank's local frame, as the
  /// plan builder delivers halo items) lies inside the home domain [lo, hi), clear when it
  /// lies in the imported shell above it. Every local item lies at or above lo, so this
  /// rank owns a pair exactly when, along every axis, one of its two items is inside:
  /// owns_pair(home_axes(a), home_axes(b)). Decided once in double at plan time, the masks
  /// keep ownership exact when the coordinates are later rounded (float): comparing rounded
  /// coordinates with the domain bounds can count a pair and its periodic image both or
  /// neither (an atom at x = 0 and its image at float(L) < L).
  std::uint8_t home_axes(const double* position) const;
  static bool owns_pair(std::uint8_t axes_a, std::uint8_t axes_b) { return (axes_a | axes_b) == 7; }
  /// Whether this rank computes the pair at positions a and b (in its local frame, as the
  /// halo exchange delivers them): it owns their component-wise minimum.
  bool owns_pair(const double* a, const double* b) const;
};

/// A grid pulse: the face `send_type` of the field goes to send_rank, `recv_type` is filled
/// from recv_rank (both describe one instance at the field's base address).
struct GridPulse {
  PulseHeader header;
  Datatype send_type;
  Datatype recv_type;
};

/// A 3D field of `element`s with `interior` cells per axis and `halo` ghost layers on each
/// side, x fastest: extent = interior + 2 * halo. Six pulses: (z-, z+), (y-, y+), (x-, x+);
/// the y pulses carry the z halo and the x pulses carry both, so edges and corners arrive.
struct GridPlan {
  std::array<std::int64_t, 3> interior{};
  int halo = 1;
  Datatype element;
  std::array<std::int64_t, 3> extent{};  // the allocated array, padding included
  std::vector<GridPulse> pulses;
  /// The bytes from the field's pointer that the pulses' types may touch: 0 means one array
  /// (extent's cells of `element`). A plan over several arrays at once (halox-lbm's 19
  /// populations, one after another) says how far they reach. An exchange refuses a type
  /// that reaches outside them, naming the pulse.
  std::int64_t field_bytes = 0;
  /// The grid rank the plan was made for (make_grid_plan and the builders set it; -1:
  /// unknown). An exchange refuses a plan given for another rank, naming both.
  int rank = -1;
};

/// A rank's part of a global lattice split over a rank grid: where its interior starts, in
/// global cells, and how many cells it holds per axis (x, y, z).
struct Subdomain {
  std::array<std::int64_t, 3> offset{};
  std::array<std::int64_t, 3> interior{};
};

/// The part of a lattice of `global` cells per axis held by `rank` of `topology` (by default
/// its own rank), balanced: each of an axis's d ranks gets global / d cells and the first
/// global % d of them one more, in rank-grid order (halox-lbm's split).
/// Pure (no communication); every rank computes every rank's part alike. Throws
/// halox::Error when an axis has fewer cells than ranks (one would hold none), naming it.
Subdomain subdomain_of(const Topology& topology, std::array<std::int64_t, 3> global, int rank = -1);

/// Builds the grid plan for this rank (pure: no communication). `allocated` is the array's
/// extent per axis (x, y, z, in elements) when its rows or planes are padded, e.g. so that
/// every row starts on a 32-byte DRAM sector; zero (the default) means interior + 2 * halo.
/// Padding cells are never read or written. Throws halox::Error for non-positive sizes, a
/// halo wider than the interior, or an allocated extent smaller than interior + 2 * halo.
GridPlan make_grid_plan(const Topology& topology, std::array<std::int64_t, 3> interior, int halo,
                        const Datatype& element, std::array<std::int64_t, 3> allocated = {});

#if HALOX_HAS_MPI
/// Collective over the topology's communicator: checks that every pulse's send size equals
/// the matching receive size of its peer. On a mismatch every rank throws halox::Error
/// naming the two ranks, the pulse and both sizes.
void validate_plan(const Topology& topology, const std::vector<PulseHeader>& pulses);

/// Collective: builds the particle plan of this rank. `xyz` holds the home atoms'
/// coordinates (x, y, z interleaved, inside this rank's domain) and is extended with the
/// received halo coordinates. Throws halox::Error (on every rank) for a cutoff that is not
/// positive or not shorter than half the box, or a home atom outside the domain.
ParticlePlan build_particle_plan(const Topology& topology, const Box& box, double cutoff,
                                 std::vector<double>& xyz);

/// Collective: the grid plan, validated.
GridPlan build_grid_plan(const Topology& topology, std::array<std::int64_t, 3> interior, int halo,
                         const Datatype& element, std::array<std::int64_t, 3> allocated = {});

/// Collective: moves atoms that left this rank's domain to the neighbour that owns them now
/// (Z, then Y, then X, one domain per axis at most), wrapping periodic coordinates.
/// `data` holds `stride` doubles per atom, the first three its position. Atoms that moved
/// further than one domain are an error naming the rank and the atom's position.
void migrate_particles(const Topology& topology, const Box& box, std::vector<double>& data,
                       int stride);
#endif

/// What migrate_particles does to an atom that crossed a periodic edge of an axis the grid
/// does not split (this rank spans the box along it): its position wrapped back into the
/// box, in place; such an atom stays with its rank. The other axes are left as they are
/// (crossing one moves the atom to another rank, and migrate_particles wraps it then).
void wrap_unsplit_axes(const Topology& topology, const Box& box, double* position);

/// The particle plans of every rank of `topology`'s grid, built in one process (the local
/// Ranks::local: several ranks sharing one process). xyz[r] holds rank r's home coordinates and
/// is extended with its halo, as build_particle_plan does. Throws halox::Error for bad input.
std::vector<ParticlePlan> build_local_particle_plans(const Topology& topology, const Box& box,
                                                     double cutoff,
                                                     std::vector<std::vector<double>>& xyz);

/// migrate_particles for every rank of `topology`'s grid in one process: data[r] is rank
/// r's atoms; the same moves, in the same order, as the MPI version. Throws halox::Error.
void migrate_local_particles(const Topology& topology, const Box& box,
                             std::vector<std::vector<double>>& data, int stride);

/// The grid plans of every rank of `grid` (dims and periodicity; its own rank is ignored),
/// built in one process for Ranks::local: rank r gets interior[r] cells (several ranks may
/// differ, as with an uneven split) and, when given, allocated[r] (padded arrays, as
/// make_grid_plan). Throws halox::Error for bad sizes.
std::vector<GridPlan> make_local_grid_plans(
    const Topology& grid, const std::vector<std::array<std::int64_t, 3>>& interior, int halo,
    const Datatype& element, const std::vector<std::array<std::int64_t, 3>>& allocated = {});

// ---------------------------------------------------------------------------------------------
// Plans over Ranks: the same call for one rank per process (Ranks::mpi: collective over the
// processes, one plan) and for every rank of the grid in this process (Ranks::local). Entry i
// of every vector belongs to grid rank ranks.rank(i).

/// The grid plans of this process's ranks for a lattice of `global` cells per axis (x, y, z),
/// split as subdomain_of does (uneven splits included); validated with the neighbours over MPI.
/// Throws halox::Error for bad sizes (every rank, over MPI).
std::vector<GridPlan> build_grid_plans(const Ranks& ranks, std::array<std::int64_t, 3> global,
                                       int halo, const Datatype& element);

/// The particle plans of this process's ranks: xyz[i] holds rank ranks.rank(i)'s home
/// coordinates and is extended with its halo (as build_particle_plan does). Collective over
/// the processes for Ranks::mpi and Ranks::blocks (whose ranks are built in lockstep, their
/// messages copies within the process).
std::vector<ParticlePlan> build_particle_plans(const Ranks& ranks, const Box& box, double cutoff,
                                               std::vector<std::vector<double>>& xyz);

/// migrate_particles for this process's ranks: data[i] holds rank ranks.rank(i)'s atoms,
/// `stride` doubles each, the first three the position.
void migrate_particles(const Ranks& ranks, const Box& box, std::vector<std::vector<double>>& data,
                       int stride);

/// The headers of a plan's pulses (for validation and transports).
std::vector<PulseHeader> headers(const ParticlePlan& plan);
std::vector<PulseHeader> headers(const GridPlan& plan);

}  // namespace halox
