// The grid transport of Ranks::local (local_grid.hpp). Its ops are every rank's: a face is a
// sender's op paired with its receiver's, found by tag as MPI matches a message.
#include "local_grid.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "halox/error.hpp"
#include "halox/pack.hpp"
#if HALOX_HAS_CUDA
#include "halox/pack_gpu.hpp"
#endif

namespace halox::detail {

std::vector<LocalFace> pair_local_faces(const Connection& connection) {
  const int ranks = connection.ranks;
  const std::vector<Op>& ops = connection.forward;
  auto mismatch = [](const std::string& what) {
    throw Error("halox::GridExchange: " + what + ": the plans do not match");
  };
  // Every rank lists the same pulses per field, so that pulse i pairs with pulse i.
  std::map<std::pair<int, int>, int> pulses;  // (field, rank) -> ops
  for (const Op& op : ops) pulses[{op.field, op.rank}] += 1;
  for (const auto& [key, count] : pulses) {
    const auto first = pulses.find({key.first, 0});
    const int theirs = first == pulses.end() ? 0 : first->second;
    if (count != theirs) {
      mismatch("rank " + std::to_string(key.second) + " has " + std::to_string(count) +
               " pulses, rank 0 " + std::to_string(theirs));
    }
  }
  std::map<std::pair<int, int>, const Op*> by_rank_and_tag;
  for (const Op& op : ops) by_rank_and_tag[{op.rank, op.tag}] = &op;
  std::vector<LocalFace> faces;
  for (const Op& here : ops) {
    const int to = here.send_rank;
    if (to < 0) continue;
    if (to >= ranks) {
      throw Error("halox::GridExchange: rank " + std::to_string(here.rank) + "'s " + here.name +
                  " sends to rank " + std::to_string(to) + ", beyond the " + std::to_string(ranks) +
                  " ranks given");
    }
    const auto found = by_rank_and_tag.find({to, here.tag});
    const Op* theirs = found == by_rank_and_tag.end() ? nullptr : found->second;
    if (!theirs || theirs->recv_rank != here.rank || theirs->recv_bytes != here.send_bytes) {
      mismatch("rank " + std::to_string(here.rank) + "'s " + here.name + " sends " +
               std::to_string(here.send_bytes) + " bytes to rank " + std::to_string(to) +
               ", which expects " + std::to_string(theirs ? theirs->recv_bytes : 0) +
               " bytes from rank " + std::to_string(theirs ? theirs->recv_rank : -1));
    }
    faces.push_back({here.stage, here.pulse, here.field * ranks + here.rank,
                     here.field * ranks + to, here.send_type, theirs->recv_type, here.name});
  }
  std::stable_sort(faces.begin(), faces.end(),
                   [](const LocalFace& a, const LocalFace& b) { return a.stage < b.stage; });
  return faces;
}

namespace {

// Host arrays (CPU copies) and local-pulse (a copy kernel per face); local-fused is the grid
// kernel's transport (grid_fused.hpp).
class LocalGridTransport final : public Transport {
 public:
  explicit LocalGridTransport(bool device) : m_device(device) {}

  std::string name() const override { return m_device ? "local-pulse" : "host"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.direct_stores = true;
    c.host_waits = !m_device;
    return c;
  }
  void connect(const Connection& connection) override {
    Transport::connect(connection);
    m_faces = pair_local_faces(connection);
    m_faces_between_ranks = 0;
    m_bytes_between_ranks = 0;
    for (const LocalFace& f : m_faces) {
      if (f.from == f.to) continue;
      m_faces_between_ranks += 1;
      m_bytes_between_ranks += f.send_type.size();
    }
  }
  int launches_per_run() const override { return static_cast<int>(m_faces.size()); }
  // Copy kernels with no counters (copy_async sets up outside a capture itself).
  bool capturable() const override { return m_device; }
  bool set_up_for(Direction, std::span<void* const>) const override { return true; }

  void run_async(Direction direction, std::span<void* const> fields,
                 std::span<const GpuStream> streams, ExchangeStats& stats) override {
    const GpuStream stream = streams.front();  // one GPU
    if (direction != Direction::forward) {
      throw Error("halox: internal: a grid exchange runs forward only");
    }
    stats.exchanges += 1;
    stats.messages += m_faces_between_ranks;
    stats.bytes_sent += m_bytes_between_ranks;
    if (!m_device) {
      // Within a stage, faces read interior layers and write halo layers: no face reads what
      // another of its stage writes, so they need no order among themselves.
      for (const LocalFace& f : m_faces) {
        m_scratch.resize(static_cast<std::size_t>(f.send_type.size()));
        pack(fields[f.from], 1, f.send_type, m_scratch.data());
        unpack(m_scratch.data(), fields[f.to], 1, f.recv_type);
      }
      return;
    }
#if HALOX_HAS_CUDA
    for (const LocalFace& f : m_faces)
      copy_async(fields[f.from], f.send_type, fields[f.to], f.recv_type, stream);
#else
    (void)stream;
    throw Error("halox: internal: GPU arrays in a build without CUDA");
#endif
  }

 private:
  bool m_device;
  std::vector<LocalFace> m_faces;  // every field's, in stage order
  std::vector<char> m_scratch;
  int m_faces_between_ranks = 0;
  std::int64_t m_bytes_between_ranks = 0;
};

}  // namespace

std::unique_ptr<Transport> make_local_grid_transport(bool device) {
  return std::make_unique<LocalGridTransport>(device);
}

}  // namespace halox::detail
