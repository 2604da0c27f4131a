// halox: a Cartesian grid of ranks.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "halox/config.hpp"

#if HALOX_HAS_MPI
#include <mpi.h>
#endif

namespace halox {

/// Axes of the rank grid and of the simulation box. Pulses run Z, then Y, then X (particle
/// plans: the periodic axes one rank spans first).
enum Axis : int { X = 0, Y = 1, Z = 2 };

/// The default time-out of halox's collective calls on a Topology (Topology::timeout_seconds).
inline constexpr double kPlanTimeoutSeconds = 30.0;

/// A Cartesian grid of ranks, 1D to 3D (any dimension may be 1), periodic or not per axis.
/// Rank r has coordinates (x, y, z) with r = x + dims[X] * (y + dims[Y] * z).
class Topology {
 public:
  /// A grid of dims[X] x dims[Y] x dims[Z] ranks seen from `rank`. Throws halox::Error
  /// when a dimension is not positive, the product does not fit in an int, or the rank is
  /// outside the grid.
  Topology(std::array<int, 3> dims, std::array<bool, 3> periodic, int rank);

#if HALOX_HAS_MPI
  /// Collective over `comm`: the grid over every rank of `comm`. Dimensions given as 0 are
  /// chosen by MPI_Dims_create; a product that differs from the communicator size is an
  /// error that names both. halox duplicates `comm` (MPI_Comm_dup) for its plans and
  /// transports, so its messages never meet the caller's, even a receive with
  /// MPI_ANY_SOURCE and MPI_ANY_TAG; copies of the Topology share the duplicate, which the
  /// last one frees.
  static Topology from_mpi(MPI_Comm comm, std::array<int, 3> dims = {0, 0, 0},
                           std::array<bool, 3> periodic = {true, true, true});
  /// halox's own communicator: the duplicate of the one from_mpi was given (MPI_COMM_NULL
  /// when built without one). Collectives of the caller on it are safe; the caller's
  /// point-to-point messages belong on its own communicator.
  MPI_Comm comm() const {
    return m_comm ? *m_comm : MPI_COMM_NULL;
  }
  /// Collective over the topology's ranks: the same grid on a communicator of its own (a
  /// bounded MPI_Comm_idup of this one), whose messages never meet this one's or another
  /// duplicate's. Every exchange of one rank per process takes one, so that several
  /// exchanges on one Topology can be in flight at once, from one thread or several.
  Topology duplicate() const;
#endif

  int rank() const {
    return m_rank;
  }
  int size() const {
    return m_dims[0] * m_dims[1] * m_dims[2];
  }
  const std::array<int, 3>& dims() const {
    return m_dims;
  }
  const std::array<bool, 3>& periodic() const {
    return m_periodic;
  }
  /// This rank's coordinates.
  std::array<int, 3> coords() const {
    return coords_of(m_rank);
  }
  /// The coordinates of `rank`; throws halox::Error for a rank outside the grid.
  std::array<int, 3> coords_of(int rank) const;
  /// The rank at `coords`, wrapping periodic axes; -1 when off a non-periodic edge.
  int rank_of(std::array<int, 3> coords) const;
  /// The neighbour of `rank` one step along `axis` in `direction` (-1 or +1); -1 when none.
  /// Throws halox::Error for a rank outside the grid, an axis other than 0, 1, 2 or a
  /// direction other than -1, +1.
  int neighbor(int rank, int axis, int direction) const;
  int neighbor(int axis, int direction) const {
    return neighbor(m_rank, axis, direction);
  }
  /// "2x2x1 periodic xyz" style description.
  std::string describe() const;

  /// How long halox's collective calls on this topology (the plan builders, validate_plan,
  /// migrate_particles and their agreement steps) wait for a rank before each waiting rank
  /// throws HaloTimeoutError naming the ranks that did not arrive. kPlanTimeoutSeconds by
  /// default: ranks reach their first plan after set-up work of their own; a simulation that
  /// re-plans every few steps in lockstep can set its exchange's time-out here.
  double timeout_seconds() const {
    return m_timeout_seconds;
  }
  /// Sets timeout_seconds; throws halox::Error unless 0 < seconds <= 1e6 (finite).
  void set_timeout_seconds(double seconds);

 private:
  std::array<int, 3> m_dims;
  std::array<bool, 3> m_periodic;
  int m_rank;
  double m_timeout_seconds = kPlanTimeoutSeconds;
#if HALOX_HAS_MPI
  std::shared_ptr<const MPI_Comm> m_comm;  // halox's duplicate, freed with the last copy
#endif
};

#if HALOX_HAS_MPI
/// MPI_Allreduce over `topology`'s communicator, bounded by its timeout_seconds: a rank that
/// does not arrive ends every waiting rank's call in a HaloTimeoutError naming it and `what`
/// ("the thermo output"), instead of a hang. `in` may be MPI_IN_PLACE. For a simulation's
/// own reductions between its exchanges; collective over the topology's ranks.
void allreduce(const Topology& topology, const void* in, void* out, int count, MPI_Datatype type,
               MPI_Op op, const char* what);
#endif

/// A rank grid of `ranks` ranks for a periodic grid of `cells` cells (x fastest in memory)
/// whose halo is cheap to move: the fewest face cells per rank, the cells of x faces counted
/// `x_face_weight` times. An x face is one element per row: each 32-byte DRAM sector it
/// reads or writes carries one element (and a halo element written into part of a sector is
/// read back first), where a y or z face moves whole rows; 32 / element bytes is a fair
/// weight. Axes one rank spans move nothing (the update wraps them, or a copy to itself);
/// ties go to splitting the slower axes (z, then y). Each rank keeps at least one cell per
/// axis; throws halox::Error when no grid fits.
std::array<int, 3> grid_rank_dims(int ranks, const std::array<long, 3>& cells,
                                  double x_face_weight);

/// Parses "2x2x1" (or "4", "2x3") into rank-grid dimensions; missing trailing ones are 1
/// unless `min_dims` asks for more (3 for a lattice, whose "16x16" is then refused, not taken
/// as 16x16x1). Values are decimal digits only (no sign, blank or "0x"). Throws halox::Error
/// naming the text when it is not that form or a value is not positive.
std::array<int, 3> parse_dims(const std::string& text, int min_dims = 1);

}  // namespace halox
