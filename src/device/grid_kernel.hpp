// The host side of the grid kernel (grid_fused_kernels.cuh), for the transports of either
// locality: a table of faces cut into tiles, with the waits of the faces that forward, in
// device memory; and its launch. Include only from CUDA sources.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "grid_fused_kernels.cuh"

namespace halox::detail::fused_grid {

/// A face as a transport describes it: the GridFace's kind, slots, records' ranks, channels,
/// bytes, word and typed views (in that word); the tiles, waits and counters are the table's.
struct FacePlan {
  GridFace face;
  int stage = 0;
  bool relayed = false;  // a link through the host proxy: its waits are relayed (channel.cuh)
  int send_op = -1, recv_op = -1;  // the transport's ops whose datatypes it packs, unpacks
};

/// The device tables of one set of faces in stage order, and their counters.
class GridTable {
 public:
  /// Tiles of `tile_words` words; a face waits for the faces of earlier stages that write the
  /// slot it reads (what it forwards).
  GridTable(std::vector<FacePlan> faces, long long tile_words);
  ~GridTable();
  GridTable(const GridTable&) = delete;
  GridTable& operator=(const GridTable&) = delete;

  /// One launch of the kernel (PUTS: some face's peer is reached by puts; traced: tracing
  /// was on when the caller sized `max_blocks`): `a` carries the transport's part (its epoch
  /// counter, time-out, error sink, scope, stall, fields), the table fills in its own. The
  /// launch takes its counters from the device (GridCounters): it may be captured in a CUDA
  /// graph and replayed, each replay a new exchange.
  void launch(GridArgs a, int max_blocks, bool puts, bool traced, int trace_object,
              cudaStream_t stream);
  int total_tiles() const { return m_total_tiles; }

 private:
  GridFace* m_faces = nullptr;
  int* m_tile_face = nullptr;
  u64* m_counters = nullptr;         // done per face, the ticket, packed, ready relays, data relays
  GridCounters* m_launch = nullptr;  // at the end of m_counters
  int m_face_count = 0, m_total_tiles = 0;
  long long m_tile_words = 0;
};

/// Words per tile: 256 threads with kBatch words in flight each, once. Measured on the 8-rank
/// LBM (docs/PERFORMANCE.md, 41e61ea): against two rounds per tile, the exchange kernels took
/// 15 and 32 us, not 22 and 35 (1x2x4), and 30 and 175, not 40 and 192 (2x2x2); four and
/// eight rounds were slower still. HALOX_GRID_TILE_WORDS, a multiple of 256 * kBatch, sets it
/// for measurements of the choice.
long long grid_tile_words();

/// Blocks of the grid kernel the GPU holds at once (traced or not, with puts or not).
int grid_resident_blocks(bool puts, bool traced);

/// The tables of one set of faces at the fields' alignments: each face's word follows from
/// its arrays' addresses modulo 16, so one table serves every set of fields at the same
/// offsets (a field and its copy for the next step alike), made on first use.
class GridTables {
 public:
  /// The table for these fields; `make` gives the faces with their words and typed views
  /// for them when there is none yet.
  template <class Make>
  GridTable& at(std::span<void* const> fields, Make&& make) {
    key_of(fields, m_key);  // a member: no allocation per exchange
    auto found = m_tables.find(m_key);
    if (found != m_tables.end()) return *found->second;
    auto table = std::make_unique<GridTable>(make(fields), grid_tile_words());
    return *m_tables.emplace(m_key, std::move(table)).first->second;
  }
  /// Whether the table for these fields is made (a CUDA graph capture needs it beforehand).
  bool has(std::span<void* const> fields) const {
    std::vector<std::uintptr_t> key;
    key_of(fields, key);
    return m_tables.count(key) > 0;
  }
  void clear() { m_tables.clear(); }

 private:
  static void key_of(std::span<void* const> fields, std::vector<std::uintptr_t>& key) {
    key.clear();
    for (void* f : fields) key.push_back(reinterpret_cast<std::uintptr_t>(f) % 16);
  }
  std::map<std::vector<std::uintptr_t>, std::unique_ptr<GridTable>> m_tables;
  std::vector<std::uintptr_t> m_key;
};

}  // namespace halox::detail::fused_grid
