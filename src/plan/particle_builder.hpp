// The particle plan builder, shared by the MPI build (one rank per process) and the local
// build (every rank of a grid in one process): the same pulse logic, only the transfer of
// the selected coordinates differs.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "halox/error.hpp"
#include "halox/plan.hpp"

namespace halox::detail {

/// Empty when the inputs of one rank are valid, else the message.
inline std::string check_particle_input(const Topology& topology, const Box& box, double cutoff,
                                        const std::vector<double>& xyz) {
  if (xyz.size() % 3 != 0) return "halox::build_particle_plan: xyz holds no whole atoms";
  for (int a = 0; a < 3; ++a) {
    if (!(cutoff > 0) || !(cutoff < 0.5 * box.length[a])) {
      return "halox::build_particle_plan: the cutoff " + std::to_string(cutoff) +
             " must be positive and shorter than half the box (" + std::to_string(box.length[a]) +
             " along " + "xyz"[a] + ")";
    }
  }
  const Domain domain = domain_of(topology, box, topology.rank());
  for (std::size_t i = 0; i < xyz.size() / 3; ++i) {
    for (int a = 0; a < 3; ++a) {
      const double v = xyz[3 * i + a];
      if (!(v >= domain.lo[a] && v < domain.hi[a])) {
        std::ostringstream s;
        s << "halox::build_particle_plan: home atom " << i << " of rank " << topology.rank()
          << " is at "
          << "xyz"[a] << " = " << v << ", outside its domain [" << domain.lo[a] << ", "
          << domain.hi[a] << ") (migrate_particles first)";
        return s.str();
      }
    }
  }
  return {};
}

/// A periodic coordinate back in [0, length).
inline double wrap_periodic(double v, double length) {
  v = std::fmod(v, length);
  if (v < 0) v += length;
  return v < length ? v : std::nextafter(length, 0.0);  // -1e-17 + L rounds to L
}

struct BuilderRank {
  const Topology* topology = nullptr;  // seen from this rank
  std::vector<double>* xyz = nullptr;  // home coordinates in, all local coordinates out
  ParticlePlan plan;
};

/// Builds every given rank's plan in lockstep. transfer(number, out, in) must deliver, for
/// each rank k, the coordinates that rank k's recv_rank selected (out[...] of that rank)
/// appended to in[k].
template <class Transfer>
void build_particle_plans(const Box& box, double cutoff, std::vector<BuilderRank>& ranks,
                          Transfer&& transfer) {
  const std::size_t n = ranks.size();
  std::vector<std::int64_t> total(n), begin(n), end(n);
  for (std::size_t k = 0; k < n; ++k) {
    ParticlePlan& plan = ranks[k].plan;
    plan.box = box;
    plan.cutoff = cutoff;
    plan.domain = domain_of(*ranks[k].topology, box, ranks[k].topology->rank());
    plan.home_count = static_cast<std::int64_t>(ranks[k].xyz->size() / 3);
    total[k] = plan.home_count;
  }
  const Topology& shape = *ranks[0].topology;
  // Z, Y, X, except that the periodic axes one rank spans (a pulse to itself) go first. The
  // images those pulses make are then of the rank's own atoms, so the pulses between ranks
  // forward them from their origin (GPU-initiated: no wait), and what the other rank
  // returns for them goes straight back to that origin: one hop between ranks each way, not
  // two (the pulses to itself waiting for what another rank sent, as with Z first of a 1x1x2
  // grid).
  std::vector<int> axes;
  for (int axis : {Z, Y, X})
    if (shape.dims()[axis] == 1) axes.push_back(axis);
  for (int axis : {Z, Y, X})
    if (shape.dims()[axis] > 1) axes.push_back(axis);
  int number = 0;
  // What each rank selects for a pulse and what it receives, kept between pulses (their
  // capacity reused).
  std::vector<std::vector<double>> out(n), in(n);
  for (int axis : axes) {
    const int dims = shape.dims()[axis];
    const double width = box.length[axis] / dims;
    const int pulses =
        dims == 1 ? (shape.periodic()[axis] ? 1 : 0) : static_cast<int>(std::ceil(cutoff / width));
    for (std::size_t k = 0; k < n; ++k) {
      ranks[k].plan.pulses_per_axis[axis] = pulses;
      begin[k] = 0;
      end[k] = total[k];
    }
    for (int p = 0; p < pulses; ++p, ++number) {
      for (std::size_t k = 0; k < n; ++k) {
        out[k].clear();
        in[k].clear();
      }
      for (std::size_t k = 0; k < n; ++k) {
        const Topology& t = *ranks[k].topology;
        ParticlePlan& plan = ranks[k].plan;
        const std::vector<double>& xyz = *ranks[k].xyz;
        ParticlePulse pulse;
        PulseHeader& h = pulse.header;
        h.axis = axis;
        h.direction = -1;
        h.index = p;
        h.stage = number;
        h.send_rank = t.neighbor(axis, -1);
        h.recv_rank = t.neighbor(axis, +1);
        // Crossing the lower periodic edge: the receiver sees these atoms one box up.
        if (t.coords()[axis] == 0 && h.send_rank >= 0) pulse.shift[axis] = box.length[axis];
        if (h.send_rank >= 0) {
          // The atoms within the cutoff of the lower face, selected without a branch per
          // atom (which of them are is as good as random: a mispredicted branch each
          // third atom cost more than the rest of the pass).
          const double reach = plan.domain.lo[axis] + cutoff;
          std::vector<std::int32_t>& index = pulse.send_index;
          index.resize(static_cast<std::size_t>(end[k] - begin[k]));
          std::size_t taken = 0;
          for (std::int64_t i = begin[k]; i < end[k]; ++i) {
            index[taken] = static_cast<std::int32_t>(i);
            taken += xyz[3 * i + axis] < reach ? 1 : 0;
          }
          index.resize(taken);
          std::vector<double>& selected = out[k];
          selected.resize(3 * taken);
          for (std::size_t s = 0; s < taken; ++s) {
            const std::size_t i = static_cast<std::size_t>(index[s]);
            for (int a = 0; a < 3; ++a) selected[3 * s + a] = xyz[3 * i + a] + pulse.shift[a];
          }
        }
        pulse.first_forwarded = static_cast<std::int64_t>(
            std::lower_bound(pulse.send_index.begin(), pulse.send_index.end(),
                             static_cast<std::int32_t>(plan.home_count)) -
            pulse.send_index.begin());
        h.send_size = static_cast<std::int64_t>(pulse.send_index.size());
        plan.pulses.push_back(std::move(pulse));
      }
      transfer(number, out, in);
      for (std::size_t k = 0; k < n; ++k) {
        ParticlePulse& pulse = ranks[k].plan.pulses.back();
        std::vector<double>& xyz = *ranks[k].xyz;
        xyz.insert(xyz.end(), in[k].begin(), in[k].end());
        pulse.recv_offset = total[k];
        pulse.recv_count = static_cast<std::int64_t>(in[k].size() / 3);
        pulse.header.recv_size = pulse.recv_count;
        total[k] += pulse.recv_count;
        begin[k] = pulse.recv_offset;
        end[k] = total[k];
      }
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    ranks[k].plan.total_count = total[k];
    if (total[k] > INT32_MAX) {
      throw Error("halox::build_particle_plan: " + std::to_string(total[k]) +
                  " local atoms exceed the 32-bit index maps");
    }
  }
}

/// One rank of a migration (migrate_particles, migrate_local_particles).
struct MigrateRank {
  const Topology* topology = nullptr;   // seen from this rank
  std::vector<double>* data = nullptr;  // `stride` doubles per atom, position first
  std::vector<double> down, up;         // per axis: what goes to -1, goes to +1
  std::vector<double> arrived;          // per axis: what transfer delivered
};

/// Empty when `stride` doubles per atom fit `data` (position first: at least 3, and whole
/// atoms), else the message naming `where` and the rank.
inline std::string check_migrate_input(const char* where, int rank, const std::vector<double>& data,
                                       int stride) {
  if (stride < 3) {
    return std::string("halox::") + where + ": stride " + std::to_string(stride) +
           " doubles per atom; an atom holds at least its 3 coordinates";
  }
  if (data.size() % static_cast<std::size_t>(stride) != 0) {
    return std::string("halox::") + where + ": rank " + std::to_string(rank) + "'s data holds " +
           std::to_string(data.size()) + " doubles, not a whole number of atoms of " +
           std::to_string(stride);
  }
  return {};
}

/// Moves every given rank's atoms that left its domain to the neighbour that owns them,
/// axis by axis (Z, then Y, then X), wrapping periodic coordinates. transfer(axis) must set
/// each rank's `arrived` to its +1 neighbour's `down` followed by its -1 neighbour's `up`
/// (the order of the MPI exchange). Returns the first error, or an empty string.
template <class Transfer>
std::string migrate_particles_of(const Box& box, std::vector<MigrateRank>& ranks, int stride,
                                 Transfer&& transfer) {
  std::string error;
  for (int axis : {Z, Y, X}) {
    const double length = box.length[axis];
    for (MigrateRank& r : ranks) {
      const Topology& topology = *r.topology;
      const Domain domain = domain_of(topology, box, topology.rank());
      auto wrap = [&](double v) {
        return topology.periodic()[axis] ? wrap_periodic(v, length) : v;
      };
      r.down.clear();
      r.up.clear();
      r.arrived.clear();
      // In place: the atoms that stay move up over those that left (in their order), and
      // only a coordinate outside [0, length) needs the wrap (fmod keeps the others as
      // they are), so a search where few atoms leave costs a pass of comparisons.
      std::vector<double>& data = *r.data;
      const std::size_t n = data.size() / static_cast<std::size_t>(stride);
      std::size_t kept = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double* atom = data.data() + i * stride;
        std::vector<double>* to = nullptr;
        if (topology.dims()[axis] > 1) {
          if (atom[axis] < domain.lo[axis])
            to = &r.down;
          else if (atom[axis] >= domain.hi[axis])
            to = &r.up;
        }
        if (to == nullptr) {
          double* place = data.data() + kept * stride;
          if (kept != i) std::copy(atom, atom + stride, place);
          if (!(place[axis] >= 0 && place[axis] < length)) place[axis] = wrap(place[axis]);
          ++kept;
          continue;
        }
        const std::size_t at = to->size();
        to->insert(to->end(), atom, atom + stride);
        (*to)[at + axis] = wrap((*to)[at + axis]);
        if (topology.neighbor(axis, to == &r.down ? -1 : +1) < 0 && error.empty()) {
          std::ostringstream s;
          s << "halox::migrate_particles: rank " << topology.rank() << ": an atom at "
            << "xyz"[axis] << " = " << atom[axis] << " left the non-periodic box";
          error = s.str();
        }
      }
      data.resize(kept * stride);
    }
    transfer(axis);
    for (MigrateRank& r : ranks) {
      const Topology& topology = *r.topology;
      const Domain domain = domain_of(topology, box, topology.rank());
      for (std::size_t i = 0; i < r.arrived.size(); i += stride) {
        const double v = r.arrived[i + axis];
        if (!(v >= domain.lo[axis] && v < domain.hi[axis]) && error.empty()) {
          std::ostringstream s;
          s << "halox::migrate_particles: rank " << topology.rank() << " received an atom at "
            << "xyz"[axis] << " = " << v << ", outside its domain [" << domain.lo[axis] << ", "
            << domain.hi[axis] << "): it moved more than one domain since the last migration";
          error = s.str();
        }
      }
      r.data->insert(r.data->end(), r.arrived.begin(), r.arrived.end());
    }
  }
  return error;
}

}  // namespace halox::detail
