// One rank's block of the lattice: its cells (and the back end that holds them), the
// updates, and the pieces the communication variants are made of (which planes of each field
// cross each face, the hand-written packs of the default and contig variants). It does not
// communicate: a Decomposition (decomposition.hpp) moves the faces of all its blocks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cli.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"

namespace halox::lbm {

// The halo of one field (f, g or phi): which planes cross each face.
struct FieldHalo {
  int field = 0;                         // 0 f, 1 g, 2 phi
  std::vector<std::vector<int>> planes;  // per pulse
  GridPlan plan;                         // per-pulse types covering the crossing planes
  GridPlan moved;  // the plan without the pulses of wrapped axes: what a halox exchange moves
  // The contig variant: per axis, a contiguous buffer [send -, send +, recv -, recv +] and
  // the plan of its byte ranges.
  struct Stage {
    GridPlan plan;  // the stage's two pulses over byte ranges
    std::array<std::int64_t, 2> bytes{};
    char* buffer = nullptr;
    std::vector<char> host;
  };
  std::array<Stage, 3> stages;
};

class Block {
 public:
  /// Rank topology.rank()'s block. `validated`: build the plans collectively over the
  /// topology's communicator (one rank per process), else in this process (local ranks).
  Block(Topology topology, const Cli& cli, bool validated);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  const Topology& topology() const { return m_topology; }
  Backend& backend() { return *m_backend; }
  std::array<int, 3> local() const { return m_n; }
  /// Every axis is wrapped by the update (one rank, periodic): no face to exchange.
  bool exchange_free() const { return m_wrap[0] && m_wrap[1] && m_wrap[2]; }
  /// The axes the update wraps, e.g. "yz" (the same on every rank).
  std::string wrapped_axes() const;

  /// Field k (0 f, 1 g, 2 phi): its halo and the current copy's base pointer.
  FieldHalo& halo(int k) { return k == 0 ? m_f : k == 1 ? m_g : m_phi; }
  void* field(int k);
  /// Whether the update wraps around pulse p's axis (no exchange of it), or stage s's.
  bool wraps(const FieldHalo& h, std::size_t p) const {
    return m_wrap[h.plan.pulses[p].header.axis];
  }
  bool stage_wraps(const FieldHalo& h, int s) const {
    return wraps(h, 2 * static_cast<std::size_t>(s));
  }

  // The updates between the exchanges: the first (BGK, or the phi pass) and the second (the
  // fused stream-collide pass); the overlap variant's halves of pass 0 or 1 (the cells that
  // read no halo on the side stream, after fork(), while the halo travels, then the boundary
  // shell, which joins the side stream); the swap that ends a step. Each is a span on the
  // event log ("update", "inner", "shell"; " 2" for pass 1) when it records (--trace): the
  // exchange's place among them.
  void first_update() { whole_update("update", 0); }
  void second_update() { whole_update("update 2", 1); }
  void fork() { m_backend->fork(); }  // the side stream waits for the main stream's work
  void update_inner(int pass);
  void update_shell(int pass);        // then joins the side stream
  void update_shell_alone(int pass);  // leaves the side stream running (join() later)
  void join() { m_backend->join(); }
  void finish_step() { m_backend->swap(); }

  // The contig variant: stage s's two faces packed by hand into the front of its buffer
  // (which, with its byte-range plan, is made at the first call), and unpacked from the back
  // once an exchange has filled it.
  void contig_pack(FieldHalo& h, int s);
  void contig_unpack(FieldHalo& h, int s);
  // The default variant: pulse p's face packed by hand and copied into the host send buffer
  // (returns its bytes; the receive buffer is sized alike), and unpacked from the host
  // receive buffer.
  std::size_t hand_pack(FieldHalo& h, std::size_t p);
  void hand_unpack(FieldHalo& h, std::size_t p);
  std::vector<char>& host_send() { return m_host_send; }
  std::vector<char>& host_recv() { return m_host_recv; }

  /// This block's fluid mass, phase A and B amounts, kinetic energy.
  std::array<double, 4> totals();
  /// This block's cells: the global cell number, then rho, ux, uy, uz, phi, per cell.
  std::vector<double> tagged_moments();
  /// Tagged moments of every rank (any order) -> the moments in global cell order; every
  /// cell of the global grid exactly once, or an error.
  static std::vector<double> in_global_order(const std::vector<double>& all,
                                             const std::array<int, 3>& grid);

 private:
  std::int64_t plane_bytes() const;
  bool halox_moves() const { return m_cli.comm == "datatype" || m_cli.comm == "overlap"; }
  void initialise();
  FieldHalo make_halo(int field, const GridPlan& base, int q_count);
  void contig_setup(FieldHalo& h, int s);
  Region whole() const { return Region{{1, 1, 1}, {m_n[0] + 1, m_n[1] + 1, m_n[2] + 1}}; }
  void update(int pass, std::span<const Region> r, bool side = false);
  void updates(const char* span, int pass, std::span<const Region> regions, bool side = false);
  void whole_update(const char* span, int pass) {
    const Region r = whole();
    updates(span, pass, {&r, 1});
  }
  Region inner_box() const;
  std::vector<Region> shell_boxes() const;

  Cli m_cli;
  Topology m_topology;
  std::array<int, 3> m_n{}, m_offset{};
  std::array<bool, 3> m_wrap{};  // periodic axes this rank spans alone, wrapped by the update
  std::unique_ptr<Backend> m_backend;
  int m_real_bytes = 4;
  FieldHalo m_f, m_g, m_phi;
  std::vector<char> m_host_send, m_host_recv;
  void* m_device_send = nullptr;
  void* m_device_recv = nullptr;
  std::size_t m_device_bytes = 0;
};

}  // namespace halox::lbm
