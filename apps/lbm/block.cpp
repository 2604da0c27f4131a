// One rank's block of the lattice (block.hpp).
#include "block.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/mpi.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>

#include "../common/cuda_check.hpp"
#define LBM_CUDA(call) HALOX_APP_CUDA("halox-lbm: ", call)
#endif

namespace halox::lbm {

namespace {

double hash01(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;
}

// The cells a pulse sends and receives (halo coordinates, [lo, hi)).
struct FaceBoxes {
  std::array<int, 3> send_lo{}, send_hi{}, recv_lo{}, recv_hi{};
};
FaceBoxes face_boxes(const PulseHeader& hd, const std::array<int, 3>& n) {
  FaceBoxes b;
  for (int a = 0; a < 3; ++a) {
    const bool done = a > hd.axis;  // axes exchanged earlier carry their halo along
    b.send_lo[a] = b.recv_lo[a] = done ? 0 : 1;
    b.send_hi[a] = b.recv_hi[a] = done ? n[a] + 2 : n[a] + 1;
  }
  const int a = hd.axis;
  b.send_lo[a] = hd.direction < 0 ? 1 : n[a];
  b.send_hi[a] = b.send_lo[a] + 1;
  b.recv_lo[a] = hd.direction < 0 ? n[a] + 1 : 0;
  b.recv_hi[a] = b.recv_lo[a] + 1;
  return b;
}

// Phase times from points marked in stream order on one back end, read one step late: the
// host waits for step s - 1 while step s is queued, so the GPU never idles between the
// phases or the steps of a stream-ordered exchange. A step marks the points of its set
// (two sets, by step parity): before the exchanges, after them, after the first update,
// after the phi exchange, after the second update (multiphase). A step that moves nothing

}  // namespace

Block::Block(Topology topology, const Cli& cli, bool validated)
    : m_cli(cli), m_topology(std::move(topology)) {
  const auto dims = m_topology.dims();
  for (int a = 0; a < 3; ++a) {
    if (cli.grid[a] < dims[a]) {
      throw Error("halox-lbm: the grid has " + std::to_string(cli.grid[a]) + " cells along " +
                  "xyz"[a] + " for " + std::to_string(dims[a]) + " ranks: at least one each");
    }
  }
  // Uneven splits: the first (n mod d) ranks of an axis get one more cell.
  const Subdomain part = subdomain_of(m_topology, {cli.grid[0], cli.grid[1], cli.grid[2]});
  for (int a = 0; a < 3; ++a) {
    m_n[a] = static_cast<int>(part.interior[a]);
    m_offset[a] = static_cast<int>(part.offset[a]);
    m_wrap[a] = cli.self_halo == "wrap" && dims[a] == 1 && m_topology.periodic()[a];
  }
  const bool gpu = cli.device == "gpu" || (cli.device == "auto" && visible_gpus() > 0);
  m_backend = gpu ? make_gpu_backend(cli.single) : make_cpu_backend(cli.single);
  if (!gpu && cli.transport_given && !cli.local && cli.transport != TransportKind::host) {
    throw Error("halox-lbm: the CPU back end keeps host arrays: use --transport host");
  }
  m_backend->allocate(m_n, cli.params.multiphase, m_wrap);
  if ((long long)m_backend->row_pitch() * (m_n[1] + 2) * (m_n[2] + 2) >= kMaxPlaneElements) {
    throw Error("halox-lbm: " + std::to_string(m_n[0]) + "x" + std::to_string(m_n[1]) + "x" +
                std::to_string(m_n[2]) + " cells on one rank: a plane of 2^30 elements or " +
                "more; use more ranks");
  }
  initialise();
  const Datatype real = m_backend->real() == BasicKind::float32 ? Datatype::of<float>().commit()
                                                                : Datatype::of<double>().commit();
  m_real_bytes = m_backend->real() == BasicKind::float32 ? 4 : 8;
  // The back end's rows may be padded (aligned on the GPU): the plan's types follow them.
  const std::array<std::int64_t, 3> interior = {m_n[0], m_n[1], m_n[2]},
                                    allocated = {m_backend->row_pitch(), m_n[1] + 2, m_n[2] + 2};
  const GridPlan base = validated ? build_grid_plan(m_topology, interior, 1, real, allocated)
                                  : make_grid_plan(m_topology, interior, 1, real, allocated);
  m_f = make_halo(0, base, Q);
  if (cli.params.multiphase) {
    m_g = make_halo(1, base, QG);
    m_phi = make_halo(2, base, 0);
  }
}

Block::~Block() {
#if HALOX_HAS_CUDA
  // The default and contig variants' device buffers.
  cudaFree(m_device_send);
  cudaFree(m_device_recv);
  if (m_backend && m_backend->on_device()) {
    for (FieldHalo* h : {&m_f, &m_g, &m_phi}) {
      for (auto& st : h->stages) cudaFree(st.buffer);
    }
  }
#endif
}

std::string Block::wrapped_axes() const {
  std::string axes;
  for (int a = 0; a < 3; ++a) {
    if (m_wrap[a]) axes += "xyz"[a];
  }
  return axes;
}

void* Block::field(int k) {
  return k == 0 ? m_backend->f() : k == 1 ? m_backend->g() : m_backend->phi();
}

std::int64_t Block::plane_bytes() const {
  return static_cast<std::int64_t>(m_backend->row_pitch()) * (m_n[1] + 2) * (m_n[2] + 2) *
         m_real_bytes;
}

void Block::initialise() {
  const Params& p = m_cli.params;
  std::vector<double> cells;
  cells.reserve(static_cast<std::size_t>(m_n[0]) * m_n[1] * m_n[2] * 26);
  const double k0 = 2 * M_PI / m_cli.grid[0], k1 = 2 * M_PI / m_cli.grid[1];
  const double xi = std::sqrt(p.kappa / p.A);
  for (int z = 0; z < m_n[2]; ++z)
    for (int y = 0; y < m_n[1]; ++y)
      for (int x = 0; x < m_n[0]; ++x) {
        const int gx = x + m_offset[0], gy = y + m_offset[1], gz = z + m_offset[2];
        double rho = 1, ux = 0, uy = 0, phi = 0;
        if (m_cli.init == "taylor-green") {
          const double U = m_cli.velocity, X = k0 * (gx + 0.5), Y = k1 * (gy + 0.5);
          ux = U * std::sin(X) * std::cos(Y);
          uy = -U * std::cos(X) * std::sin(Y);
          // The matching pressure field, p = -U^2/4 (cos 2X + cos 2Y), as rho = 1 + 3 p.
          rho = 1 - 0.75 * U * U * (std::cos(2 * X) + std::cos(2 * Y));
        } else if (m_cli.init == "droplet") {
          const double dx = gx + 0.5 - m_cli.grid[0] / 2.0, dy = gy + 0.5 - m_cli.grid[1] / 2.0,
                       dz = gz + 0.5 - m_cli.grid[2] / 2.0;
          const double r = std::sqrt(dx * dx + dy * dy + dz * dz);
          phi = std::tanh((m_cli.radius - r) / (std::sqrt(2.0) * xi));
        } else if (m_cli.init == "spinodal") {
          const std::uint64_t id =
              (static_cast<std::uint64_t>(gz) * m_cli.grid[1] + gy) * m_cli.grid[0] + gx;
          phi = 0.1 * (2 * hash01(m_cli.seed, id) - 1);
        }
        for (int q = 0; q < Q; ++q) cells.push_back(equilibrium<double>(q, rho, ux, uy, 0.0));
        // D3Q7 at rest with mu = 0: everything in the rest population.
        cells.push_back(phi);
        for (int q = 1; q < QG; ++q) cells.push_back(0.0);
      }
  m_backend->upload(cells);
}

// Per pulse, the planes whose populations cross that face toward the receiver: those
// with e_axis == direction (the receiver pulls them from its halo). phi: its only plane.
FieldHalo Block::make_halo(int field, const GridPlan& base, int q_count) {
  FieldHalo h;
  h.field = field;
  h.plan = base;
  for (auto& pulse : h.plan.pulses) {
    std::vector<int> planes;
    if (field == 2) {
      planes = {0};
    } else {
      for (int q = 0; q < q_count; ++q) {
        const int e[3] = {ex(q), ey(q), ez(q)};
        if (e[pulse.header.axis] == pulse.header.direction) planes.push_back(q);
      }
    }
    std::vector<std::int64_t> blocks(planes.size(), 1), disps;
    for (int q : planes) disps.push_back(q * plane_bytes());
    const std::vector<Datatype> sends(planes.size(), pulse.send_type),
        recvs(planes.size(), pulse.recv_type);
    pulse.send_type = Datatype::struct_(blocks, disps, sends).commit();
    pulse.recv_type = Datatype::struct_(blocks, disps, recvs).commit();
    const std::int64_t factor = static_cast<std::int64_t>(planes.size());
    pulse.header.send_size *= factor;
    pulse.header.recv_size *= factor;
    h.planes.push_back(planes);
  }
  // The populations lie one after another, a plane_bytes() apart: the types reach them all.
  h.plan.field_bytes = std::max(q_count, 1) * plane_bytes();
  h.moved = h.plan;
  std::erase_if(h.moved.pulses, [&](const GridPulse& p) { return m_wrap[p.header.axis]; });
  return h;
}

void Block::update(int pass, std::span<const Region> r, bool side) {
  if (pass == 1) {
    m_backend->stream_collide(m_cli.params, r, side);
  } else if (m_cli.params.multiphase) {
    m_backend->update_phi(r, side);
  } else {
    m_backend->bgk_step(1.0 / m_cli.params.tau, r, side);
  }
}

// Cells whose whole stencil lies inside this rank's interior: along an axis the update wraps
// (no halo), every cell. Along a split x its ends sit on the back end's row alignment (a DRAM
// sector on the GPU), so that the x slabs of the shell update whole sectors, not one-cell
// columns that each cost a sector per cell.
Region Block::inner_box() const {
  const int w = m_backend->row_alignment();
  Region r{{1 + w, 2, 2}, {1 + (m_n[0] - 1) / w * w, m_n[1], m_n[2]}};
  for (int a = 0; a < 3; ++a) {
    if (m_wrap[a]) r.lo[a] = 1, r.hi[a] = m_n[a] + 1;
  }
  return r;
}

// The interior minus the inner box, as disjoint slabs: z ends, then y ends, then x ends.
std::vector<Region> Block::shell_boxes() const {
  const Region inner = inner_box();
  std::vector<Region> out;
  std::array<int, 3> lo = {1, 1, 1}, hi = {m_n[0] + 1, m_n[1] + 1, m_n[2] + 1};
  for (int a : {2, 1, 0}) {
    Region low{lo, hi}, high{lo, hi};
    low.hi[a] = std::clamp(inner.lo[a], lo[a], hi[a]);
    high.lo[a] = std::max(low.hi[a], std::min(inner.hi[a], hi[a]));
    if (low.cells() > 0) out.push_back(low);
    if (high.cells() > 0) out.push_back(high);
    lo[a] = low.hi[a];
    hi[a] = high.lo[a];
  }
  return out;
}

void Block::updates(const char* span, int pass, std::span<const Region> regions, bool side) {
  m_backend->trace_span(span, m_topology.rank(), true, side);
  update(pass, regions, side);
  m_backend->trace_span(span, m_topology.rank(), false, side);
}

void Block::update_inner(int pass) {
  const Region inner = inner_box();
  updates(pass ? "inner 2" : "inner", pass, {&inner, 1}, true);
}
void Block::update_shell(int pass) {
  update_shell_alone(pass);
  m_backend->join();
}
void Block::update_shell_alone(int pass) {
  updates(pass ? "shell 2" : "shell", pass, shell_boxes());
}

void Block::contig_pack(FieldHalo& h, int s) {
  contig_setup(h, s);
  FieldHalo::Stage& st = h.stages[s];
  const std::size_t p0 = 2 * static_cast<std::size_t>(s);
  for (int k = 0; k < 2; ++k) {
    const FaceBoxes fb = face_boxes(h.plan.pulses[p0 + k].header, m_n);
    m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p0 + k],
                        st.buffer + (k ? st.bytes[0] : 0));
  }
}

void Block::contig_unpack(FieldHalo& h, int s) {
  FieldHalo::Stage& st = h.stages[s];
  const std::size_t p0 = 2 * static_cast<std::size_t>(s);
  const std::int64_t recv_base = st.bytes[0] + st.bytes[1];
  for (int k = 0; k < 2; ++k) {
    const PulseHeader& hd = h.plan.pulses[p0 + k].header;
    if (hd.recv_rank < 0) continue;
    const FaceBoxes fb = face_boxes(hd, m_n);
    m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p0 + k],
                          st.buffer + recv_base + (k ? st.bytes[0] : 0));
  }
}

// Once per field and stage: the byte-range plan and the buffer.
void Block::contig_setup(FieldHalo& h, int s) {
  FieldHalo::Stage& st = h.stages[s];
  const std::size_t p0 = 2 * static_cast<std::size_t>(s);
  if (st.buffer != nullptr) return;
  GridPlan plan = h.plan;
  plan.pulses = {h.plan.pulses[p0], h.plan.pulses[p0 + 1]};
  std::array<std::int64_t, 4> offset{};
  for (int k = 0; k < 2; ++k) {
    const FaceBoxes fb = face_boxes(plan.pulses[k].header, m_n);
    std::int64_t cells = static_cast<std::int64_t>(h.planes[p0 + k].size());
    for (int a = 0; a < 3; ++a) cells *= fb.send_hi[a] - fb.send_lo[a];
    st.bytes[k] = cells * m_real_bytes;
  }
  offset = {0, st.bytes[0], st.bytes[0] + st.bytes[1], 2 * st.bytes[0] + st.bytes[1]};
  const std::int64_t at = 2 * (st.bytes[0] + st.bytes[1]);
  const Datatype byte = Datatype::of<char>().commit();
  // Bytes [off, off + len) of the buffer.
  auto range = [&](std::int64_t off, std::int64_t len) {
    return Datatype::struct_(std::span<const std::int64_t>(&len, 1),
                             std::span<const std::int64_t>(&off, 1),
                             std::span<const Datatype>(&byte, 1))
        .commit();
  };
  for (int k = 0; k < 2; ++k) {
    plan.pulses[k].send_type = range(offset[k], st.bytes[k]);
    plan.pulses[k].recv_type = range(offset[2 + k], st.bytes[k]);
    plan.pulses[k].header.send_size = plan.pulses[k].header.send_rank >= 0 ? st.bytes[k] : 0;
    plan.pulses[k].header.recv_size = plan.pulses[k].header.recv_rank >= 0 ? st.bytes[k] : 0;
  }
  plan.field_bytes = std::max<std::int64_t>(at, 1);  // the stage's buffer
#if HALOX_HAS_CUDA
  if (m_backend->on_device()) {
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<std::size_t>(std::max<std::int64_t>(at, 1))) != cudaSuccess) {
      throw Error("halox-lbm: cudaMalloc of the contig buffers failed");
    }
    st.buffer = static_cast<char*>(p);
  } else
#endif
  {
    st.host.resize(static_cast<std::size_t>(std::max<std::int64_t>(at, 1)));
    st.buffer = st.host.data();
  }
  st.plan = std::move(plan);
}

std::size_t Block::hand_pack(FieldHalo& h, std::size_t p) {
  const FaceBoxes fb = face_boxes(h.plan.pulses[p].header, m_n);
  std::int64_t cells = static_cast<std::int64_t>(h.planes[p].size());
  for (int k = 0; k < 3; ++k) cells *= fb.send_hi[k] - fb.send_lo[k];
  const std::size_t bytes = static_cast<std::size_t>(cells * m_real_bytes);
  m_host_send.resize(bytes);
  m_host_recv.resize(bytes);
#if HALOX_HAS_CUDA
  if (m_backend->on_device()) {
    if (m_device_bytes < bytes) {
      LBM_CUDA(cudaFree(m_device_send));
      LBM_CUDA(cudaFree(m_device_recv));
      m_device_send = m_device_recv = nullptr;
      m_device_bytes = 0;
      LBM_CUDA(cudaMalloc(&m_device_send, bytes));
      LBM_CUDA(cudaMalloc(&m_device_recv, bytes));
      m_device_bytes = bytes;
    }
    m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p], m_device_send);
    LBM_CUDA(cudaMemcpyAsync(m_host_send.data(), m_device_send, bytes, cudaMemcpyDeviceToHost,
                             m_backend->stream_handle()));
    m_backend->synchronize();
    return bytes;
  }
#endif
  m_backend->pack_box(h.field, fb.send_lo, fb.send_hi, h.planes[p], m_host_send.data());
  return bytes;
}

void Block::hand_unpack(FieldHalo& h, std::size_t p) {
  const FaceBoxes fb = face_boxes(h.plan.pulses[p].header, m_n);
#if HALOX_HAS_CUDA
  if (m_backend->on_device()) {
    LBM_CUDA(cudaMemcpyAsync(m_device_recv, m_host_recv.data(), m_host_recv.size(),
                             cudaMemcpyHostToDevice, m_backend->stream_handle()));
    m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p], m_device_recv);
    m_backend->synchronize();
    return;
  }
#endif
  m_backend->unpack_box(h.field, fb.recv_lo, fb.recv_hi, h.planes[p], m_host_recv.data());
}

std::array<double, 4> Block::totals() {
  const auto m = m_backend->download_moments();
  std::array<double, 4> local{};
  for (std::size_t i = 0; i < m.size(); i += 5) {
    local[0] += m[i];
    local[1] += 0.5 * (1 + m[i + 4]);
    local[2] += 0.5 * (1 - m[i + 4]);
    local[3] += 0.5 * m[i] * (m[i + 1] * m[i + 1] + m[i + 2] * m[i + 2] + m[i + 3] * m[i + 3]);
  }
  return local;
}

std::vector<double> Block::tagged_moments() {
  const auto m = m_backend->download_moments();
  std::vector<double> mine;
  for (int z = 0; z < m_n[2]; ++z)
    for (int y = 0; y < m_n[1]; ++y)
      for (int x = 0; x < m_n[0]; ++x) {
        const std::size_t i = 5 * ((static_cast<std::size_t>(z) * m_n[1] + y) * m_n[0] + x);
        const double gi =
            ((static_cast<double>(z + m_offset[2]) * m_cli.grid[1]) + (y + m_offset[1])) *
                m_cli.grid[0] +
            (x + m_offset[0]);
        mine.push_back(gi);
        mine.insert(mine.end(), &m[i], &m[i + 5]);
      }
  return mine;
}

std::vector<double> Block::in_global_order(const std::vector<double>& all,
                                           const std::array<int, 3>& grid) {
  const std::size_t cells = static_cast<std::size_t>(grid[0]) * grid[1] * grid[2];
  if (all.size() != 6 * cells) {
    throw Error("halox-lbm: the ranks' cells add up to " + std::to_string(all.size() / 6) +
                ", not the " + std::to_string(cells) + " of the global grid");
  }
  std::vector<double> out(5 * cells);
  std::vector<bool> seen(cells, false);
  for (std::size_t k = 0; k + 6 <= all.size(); k += 6) {
    const double g = all[k];
    const std::size_t gi = static_cast<std::size_t>(g);
    if (!(g >= 0) || gi >= cells || seen[gi]) {
      throw Error("halox-lbm: a rank sent cell " + std::to_string(g) +
                  ", outside the global grid or twice");
    }
    seen[gi] = true;
    std::copy(&all[k + 1], &all[k + 6], &out[5 * gi]);
  }
  return out;
}

}  // namespace halox::lbm
