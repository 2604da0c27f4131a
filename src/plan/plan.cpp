#include <algorithm>
#include <limits>
#include <string>
#include <tuple>

#include "halox/error.hpp"
#include "halox/pack.hpp"
#include "halox/plan.hpp"
#include "plan_checks.hpp"

namespace halox {

namespace {
const char* axis_name(int axis) {
  return axis == X ? "x" : axis == Y ? "y" : "z";
}
}  // namespace

std::string PulseHeader::name(int number) const {
  return "pulse " + std::to_string(number) + " (" + axis_name(axis) + (direction < 0 ? "-" : "+") +
         " #" + std::to_string(index) + ")";
}

Domain domain_of(const Topology& topology, const Box& box, int rank) {
  const auto c = topology.coords_of(rank);
  Domain d;
  for (int a = 0; a < 3; ++a) {
    const double width = box.length[a] / topology.dims()[a];
    d.lo[a] = c[a] * width;
    // The last domain ends exactly at the box edge, whatever the rounding of c * width.
    d.hi[a] = c[a] + 1 == topology.dims()[a] ? box.length[a] : (c[a] + 1) * width;
  }
  return d;
}

int ParticlePlan::pulse_of(std::int64_t i) const {
  if (i < home_count) return -1;
  for (std::size_t p = 0; p < pulses.size(); ++p) {
    if (i < pulses[p].recv_offset + pulses[p].recv_count) return static_cast<int>(p);
  }
  return -1;
}

std::uint8_t ParticlePlan::home_axes(const double* position) const {
  std::uint8_t axes = 0;
  for (int k = 0; k < 3; ++k) {
    if (position[k] >= domain.lo[k] && position[k] < domain.hi[k]) axes |= 1u << k;
  }
  return axes;
}

bool ParticlePlan::owns_pair(const double* a, const double* b) const {
  for (int k = 0; k < 3; ++k) {
    const double m = std::min(a[k], b[k]);
    if (m < domain.lo[k] || m >= domain.hi[k]) return false;
  }
  return true;
}

Subdomain subdomain_of(const Topology& topology, std::array<std::int64_t, 3> global, int rank) {
  if (rank < 0) rank = topology.rank();
  const std::array<int, 3> coords = topology.coords_of(rank), dims = topology.dims();
  Subdomain part;
  for (int a = 0; a < 3; ++a) {
    if (global[a] < dims[a]) {
      throw Error("halox::subdomain_of: the lattice has " + std::to_string(global[a]) +
                  " cells along " + axis_name(a) + " for " + std::to_string(dims[a]) +
                  " ranks; each rank needs at least one");
    }
    const std::int64_t base = global[a] / dims[a], extra = global[a] % dims[a];
    part.interior[a] = base + (coords[a] < extra ? 1 : 0);
    part.offset[a] = coords[a] * base + std::min<std::int64_t>(coords[a], extra);
  }
  return part;
}

GridPlan make_grid_plan(const Topology& topology, std::array<std::int64_t, 3> interior, int halo,
                        const Datatype& element, std::array<std::int64_t, 3> allocated) {
  if (halo < 1) throw Error("halox::make_grid_plan: halo width " + std::to_string(halo) + " < 1");
  for (int a = 0; a < 3; ++a) {
    if (interior[a] < halo) {
      throw Error("halox::make_grid_plan: rank " + std::to_string(topology.rank()) + " has " +
                  std::to_string(interior[a]) + " interior cells along " + axis_name(a) +
                  ", fewer than the halo width " + std::to_string(halo));
    }
  }
  GridPlan plan;
  plan.rank = topology.rank();
  plan.interior = interior;
  plan.halo = halo;
  plan.element = element;
  std::array<std::int64_t, 3> with_halo{};  // interior and halo: what the pulses may touch
  for (int a = 0; a < 3; ++a) {
    with_halo[a] = interior[a] + 2 * halo;
    plan.extent[a] = allocated[a] == 0 ? with_halo[a] : allocated[a];
    if (plan.extent[a] < with_halo[a]) {
      throw Error("halox::make_grid_plan: rank " + std::to_string(topology.rank()) + " allocated " +
                  std::to_string(plan.extent[a]) + " cells along " + axis_name(a) +
                  ", fewer than interior + 2 * halo = " + std::to_string(with_halo[a]));
    }
  }
  const std::int64_t h = halo;
  int stage = 0;
  for (int axis : {Z, Y, X}) {
    for (int direction : {-1, +1}) {
      // Axes already exchanged contribute their full extent (that is how edges and corners
      // are forwarded); the others only their interior.
      std::array<std::int64_t, 3> sub{}, send_start{}, recv_start{};
      for (int a = 0; a < 3; ++a) {
        const bool done = a > axis;  // Z (2) runs first, then Y (1), then X (0)
        sub[a] = done ? with_halo[a] : interior[a];
        send_start[a] = recv_start[a] = done ? 0 : h;
      }
      sub[axis] = h;
      // direction -1: my lowest interior layers go down; my upper halo comes from above.
      send_start[axis] = direction < 0 ? h : interior[axis];
      recv_start[axis] = direction < 0 ? interior[axis] + h : 0;
      // Subarray sizes are slowest-first in C order: (z, y, x).
      const std::int64_t sizes[3] = {plan.extent[2], plan.extent[1], plan.extent[0]};
      const std::int64_t subs[3] = {sub[2], sub[1], sub[0]};
      const std::int64_t s0[3] = {send_start[2], send_start[1], send_start[0]};
      const std::int64_t r0[3] = {recv_start[2], recv_start[1], recv_start[0]};
      GridPulse pulse;
      pulse.send_type = Datatype::subarray(sizes, subs, s0, Order::c, element).commit();
      pulse.recv_type = Datatype::subarray(sizes, subs, r0, Order::c, element).commit();
      PulseHeader& hd = pulse.header;
      hd.axis = axis;
      hd.direction = direction;
      hd.stage = stage;
      hd.send_rank = topology.neighbor(axis, direction);
      hd.recv_rank = topology.neighbor(axis, -direction);
      hd.send_size = hd.send_rank < 0 ? 0 : packed_size(pulse.send_type, 1);
      hd.recv_size = hd.recv_rank < 0 ? 0 : packed_size(pulse.recv_type, 1);
      plan.pulses.push_back(std::move(pulse));
    }
    ++stage;
  }
  return plan;
}

std::vector<PulseHeader> headers(const ParticlePlan& plan) {
  std::vector<PulseHeader> out;
  for (const auto& p : plan.pulses) out.push_back(p.header);
  return out;
}

std::vector<PulseHeader> headers(const GridPlan& plan) {
  std::vector<PulseHeader> out;
  for (const auto& p : plan.pulses) out.push_back(p.header);
  return out;
}

}  // namespace halox

namespace halox::detail {

namespace {
[[noreturn]] void bad_plan(const char* where, int rank, const std::string& what) {
  throw Error(std::string("halox::") + where + ": rank " + std::to_string(rank) +
              "'s plan: " + what);
}
}  // namespace

namespace {
// The bytes from the field's pointer that a plan's types may touch: field_bytes, else the
// extent's cells of its element; 0 when the plan says neither (a plan assembled by hand
// without its extent), whose types are then not checked against the field.
std::int64_t field_bytes(const GridPlan& plan) {
  if (plan.field_bytes != 0) return plan.field_bytes;
  std::int64_t bytes = plan.element.extent();
  for (const std::int64_t n : plan.extent) {
    if (n <= 0 || __builtin_mul_overflow(bytes, n, &bytes)) return 0;
  }
  return bytes;
}
}  // namespace

void check_grid_plan(const GridPlan& plan, int rank, const char* where) {
  if (plan.rank >= 0 && plan.rank != rank) {
    bad_plan(where, rank,
             "the plan given is rank " + std::to_string(plan.rank) +
                 "'s; give the plans in the order of the ranks (Ranks::rank(index))");
  }
  if (plan.field_bytes < 0)
    bad_plan(where, rank, "field_bytes = " + std::to_string(plan.field_bytes) + " is negative");
  const std::int64_t field = field_bytes(plan);
  for (std::size_t p = 0; p < plan.pulses.size(); ++p) {
    const GridPulse& pulse = plan.pulses[p];
    const std::string name = pulse.header.name(static_cast<int>(p));
    // A pulse without a peer (a non-periodic edge) moves nothing: its header says 0.
    for (const auto& [type, size, peer, side] :
         {std::tuple{&pulse.send_type, pulse.header.send_size, pulse.header.send_rank, "send"},
          std::tuple{&pulse.recv_type, pulse.header.recv_size, pulse.header.recv_rank,
                     "receive"}}) {
      if (!type->committed())
        bad_plan(where, rank, name + ": its " + side + " type is not committed");
      if (peer >= 0 ? type->size() != size : size != 0) {
        bad_plan(where, rank,
                 name + ": its " + side + " type holds " + std::to_string(type->size()) +
                     " bytes, its header says " + std::to_string(size));
      }
      // The pack and the kernels trust the type's bounds: one reaching past the field (a
      // plan edited, or built for a larger array) would be a heap overflow, on the GPU too.
      if (field > 0 && peer >= 0 && type->size() > 0 &&
          (type->true_lb() < 0 || type->true_extent() > field - type->true_lb())) {
        bad_plan(where, rank,
                 name + ": its " + side + " type touches bytes [" +
                     std::to_string(type->true_lb()) + ", " +
                     std::to_string(type->true_lb() + type->true_extent()) +
                     ") of the field, which holds " + std::to_string(field) +
                     " (GridPlan::extent or field_bytes)");
      }
    }
  }
}

void check_particle_plan(const ParticlePlan& plan, int rank, const char* where) {
  if (plan.home_count < 0 || plan.total_count < plan.home_count ||
      plan.total_count > std::numeric_limits<std::int32_t>::max()) {
    bad_plan(where, rank,
             std::to_string(plan.home_count) + " home and " + std::to_string(plan.total_count) +
                 " items in all");
  }
  std::int64_t received = plan.home_count;  // the items a pulse may send: home and earlier ones'
  for (std::size_t p = 0; p < plan.pulses.size(); ++p) {
    const ParticlePulse& pulse = plan.pulses[p];
    const std::string name = pulse.header.name(static_cast<int>(p));
    const auto sent = static_cast<std::int64_t>(pulse.send_index.size());
    if (pulse.header.send_size != sent || pulse.header.recv_size != pulse.recv_count) {
      bad_plan(where, rank,
               name + ": its header's sizes (" + std::to_string(pulse.header.send_size) +
                   " sent, " + std::to_string(pulse.header.recv_size) +
                   " received) differ from its lists (" + std::to_string(sent) + ", " +
                   std::to_string(pulse.recv_count) + ")");
    }
    if (pulse.first_forwarded < 0 || pulse.first_forwarded > sent) {
      bad_plan(where, rank,
               name + ": first_forwarded " + std::to_string(pulse.first_forwarded) +
                   " outside its " + std::to_string(sent) + " sent items");
    }
    if (pulse.recv_count < 0 || pulse.recv_offset < plan.home_count ||
        pulse.recv_offset > plan.total_count - pulse.recv_count) {
      bad_plan(where, rank,
               name + ": it receives items [" + std::to_string(pulse.recv_offset) + ", " +
                   std::to_string(pulse.recv_offset + pulse.recv_count) + "), outside the halo [" +
                   std::to_string(plan.home_count) + ", " + std::to_string(plan.total_count) + ")");
    }
    for (const std::int32_t i : pulse.send_index) {
      if (i < 0 || i >= received) {
        bad_plan(where, rank,
                 name + ": it sends item " + std::to_string(i) + ", outside the " +
                     std::to_string(received) + " items this rank holds by then");
      }
    }
    received = std::max(received, pulse.recv_offset + pulse.recv_count);
  }
}

}  // namespace halox::detail
