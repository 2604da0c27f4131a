// The local-fused grid exchange (Ranks::local): every face of every rank of the process in one
// launch of the grid kernel (device/grid_fused_kernels.cuh), each a copy face straight from
// the sender's array to the receiver's in the widest word the face allows.
#include "local_grid_fused.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "../common/cuda_check.hpp"
#include "../device/grid_kernel.hpp"
#include "../pack/pack_device.cuh"
#include "halox/error.hpp"
#include "halox/exchange_options.hpp"
#include "../runtime/env.hpp"

namespace halox::detail {

struct LocalGridFused::Impl {
  std::vector<LocalFace> faces;
  int arrays = 0;
  fused_grid::GridTables tables;  // per alignment of the ranks' arrays
  double timeout_seconds;
  int stall_rank;
  int ranks_per_field = 1;
  int blocks = 0;  // resident blocks of the whole GPU
  ErrorChannel errors;

  fused_grid::GridTable& table_for(std::span<void* const> fields) {
    return tables.at(fields, [this](std::span<void* const> at) {
      std::vector<fused_grid::FacePlan> plans;
      for (const LocalFace& lf : faces) {
        fused_grid::FacePlan& p = plans.emplace_back();
        fused_grid::GridFace& f = p.face;
        p.stage = lf.stage;
        f.kind = fused_grid::face_copy;
        f.word = std::min(device_pack_word(lf.send_type, 1, at[lf.from]),
                          device_pack_word(lf.recv_type, 1, at[lf.to]));
        f.send = device_pack_view(lf.send_type, 1, f.word);
        f.recv = device_pack_view(lf.recv_type, 1, f.word);
        f.from = f.rank = lf.from;
        f.to = f.peer = lf.to;
        f.pulse = lf.pulse;
      }
      return plans;
    });
  }

  // `rank` as an error record names it (in_ranks): the face's sender or receiver in any field.
  std::string pulse_name(int rank, int pulse) const {
    for (const LocalFace& f : faces) {
      if (f.pulse == pulse && (f.from % ranks_per_field == rank || f.to % ranks_per_field == rank))
        return f.name;
    }
    return "pulse " + std::to_string(pulse);
  }

  // A probe over every face's link both ways (from -> to, then to -> from: links 2i and
  // 2i + 1 of face i), in one launch, waited for here. Thread j sends link j and receives
  // link j ^ 1, the same face the other way, into slots of its own.
  void self_test() {
    if (faces.empty()) return;
    ProbeSlot* slots = nullptr;
    const std::size_t slot_bytes = 2 * faces.size() * sizeof(ProbeSlot);
    HALOX_CUDA_CHECK(cudaMalloc(&slots, slot_bytes));
    fill_device_now(slots, 0, slot_bytes);
    std::vector<ProbeLink> links;
    for (const LocalFace& f : faces) {
      for (int back = 0; back < 2; ++back) {
        const int j = static_cast<int>(links.size());
        ProbeLink& link = links.emplace_back();
        link.rank = back == 0 ? f.from : f.to;
        link.peer = back == 0 ? f.to : f.from;
        link.pulse = f.pulse;
        link.kind = 1 - back;  // what this thread receives: the link back, or the face's link
        link.out = slots + j;
        link.out_link = j;
        link.in = slots + (j ^ 1);
        link.in_link = j ^ 1;
      }
    }
    // A stalled rank (tests) neither sends nor receives.
    std::erase_if(links, [this](const ProbeLink& l) { return l.rank == stall_rank; });
    ProbeRun probes;
    try {
      probes.launch(links, 1, timeout_seconds, errors.sink(), false, false);
      probes.finish();
    } catch (...) {
      cudaFree(slots);
      throw;
    }
    cudaFree(slots);
    check_device_error(in_ranks(errors.record()), wording(true));
  }

  void check() const { check_device_error(in_ranks(errors.record()), wording(false)); }

  // Several fields run as one grid of ranks_per_field * fields ranks (field f's rank r is
  // f * ranks_per_field + r): a record names the ranks themselves.
  ErrorRecord in_ranks(const volatile ErrorRecord& r) const {
    ErrorRecord e{r.flag, r.rank, r.peer, r.pulse, r.kind, r.seen, r.expected};
    e.rank %= ranks_per_field;
    e.peer %= ranks_per_field;
    return e;
  }

  // The self-test's waits are for its probes (kind 0: the face's link, 1: the link back);
  // the exchange's for the tiles of a face a tile forwards.
  ErrorWording wording(bool self_test) const {
    ErrorWording w;
    w.transport = "local-fused";
    w.timeout_seconds = timeout_seconds;
    w.pulse = [this](int rank, int pulse) { return pulse_name(rank, pulse); };
    if (arrays > ranks_per_field) {
      w.transport += " (" + std::to_string(arrays / ranks_per_field) + " fields)";
    }
    if (self_test) {
      w.waited_for = [](int kind) {
        return std::string(kind == 0 ? "the face's link" : "the link back");
      };
      w.is_probe = [](int) { return true; };
    } else {
      w.waited_for = [](int) { return std::string("a face it forwards"); };
      w.progress = [](const ErrorRecord& e) {
        return std::to_string(e.seen) + " of " + std::to_string(e.expected) + " tiles arrived";
      };
    }
    return w;
  }
};

LocalGridFused::LocalGridFused(std::vector<LocalFace> faces, int arrays,
                               const ExchangeOptions& options, int ranks_per_field)
    : m_impl(std::make_unique<Impl>()) {
  Impl& m = *m_impl;
  m.ranks_per_field = ranks_per_field;
  if (arrays > fused_grid::kMaxGridSlots) {
    throw Error("halox::GridExchange (local-fused): the fused kernel takes at most " +
                std::to_string(fused_grid::kMaxGridSlots) + " ranks times fields, not " +
                std::to_string(arrays));
  }
  m.arrays = arrays;
  m.faces = std::move(faces);
  m.timeout_seconds = options.timeout_seconds;
  m.stall_rank = options.testing.stall_rank;
  m.blocks = env_grid_blocks(std::max(1, fused_grid::grid_resident_blocks(false, false)));
  if (options.self_test) m.self_test();
}

int LocalGridFused::max_ranks() {
  return fused_grid::kMaxGridSlots;
}

LocalGridFused::~LocalGridFused() {
  cudaDeviceSynchronize();
}

bool LocalGridFused::set_up_for(std::span<void* const> fields) const {
  return m_impl->faces.empty() || m_impl->tables.has(fields);
}

void LocalGridFused::exchange(std::span<void* const> fields, GpuStream stream) {
  Impl& m = *m_impl;
  m.check();
  if (m.faces.empty()) return;
  fused_grid::GridTable& t = m.table_for(fields);
  if (t.total_tiles() == 0) return;  // faces of no words
  fused_grid::GridArgs a{};
  a.epoch = nullptr;  // no channels: copy faces only
  a.timeout_ns = static_cast<u64>(m.timeout_seconds * 1e9);
  a.error = m.errors.sink();
  a.system_scope = 0;
  a.stall_from = m.stall_rank;
  for (std::size_t r = 0; r < fields.size(); ++r) a.field[r] = static_cast<char*>(fields[r]);
  // Not traced: the spans of Ranks::local are the application's, per rank.
  t.launch(a, m.blocks, false, false, -1, stream);
}

}  // namespace halox::detail
