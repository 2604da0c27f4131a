#include "halox/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "../runtime/env.hpp"
#include "device_trace.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#if HALOX_HAS_CUDA
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "../common/cuda_check.hpp"
#endif
#if HALOX_HAS_MPI
#include "../runtime/node.hpp"
#include "halox/mpi.hpp"
#include "halox/topology.hpp"
#endif

namespace halox {

namespace detail {
#if HALOX_HAS_CUDA
// device_clock.cu: host realtime minus the device's %globaltimer.
std::int64_t device_clock_offset_ns();
#endif
}  // namespace detail

namespace trace {

namespace {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// `text` as the inside of a JSON string.
std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

// Host events kept (about 150 bytes each): the last steps of any run, as the device ring keeps
// its last records.
constexpr std::size_t kMaxHostEvents = std::size_t{1} << 16;

struct State {
  std::mutex mutex;
  bool on = false;
  bool env_checked = false;
  std::deque<Event> host;  // the newest kMaxHostEvents: a long traced run stays bounded
  detail::DeviceTrace device;
  unsigned long long reserved = 0;    // device slots handed out since the last clear()
  std::int64_t device_offset_ns = 0;  // host realtime - device globaltimer
  std::vector<std::string> objects;   // trace_object's names, by id
  // Stream spans: each name's object id, and per (name, rank) how many have begun.
  std::map<std::string, int> span_objects;
  std::map<std::pair<std::string, int>, int> spans_begun;
  // Per launch since the last clear(), in slot order: its first slot and its object. Those
  // whose slots the ring has since overwritten are dropped.
  std::deque<std::pair<unsigned long long, int>> launches;
};

State& state() {
  static State s;
  return s;
}

#if HALOX_HAS_CUDA  // device records exist only in CUDA builds
const char* event_name(int e) {
  switch (e / 2 * 2) {
    case detail::trace_pack_begin: return "pack + store";
    case detail::trace_ready_begin: return "wait: peer buffer free";
    case detail::trace_deps_begin: return "wait: forwarded items";
    case detail::trace_data_begin: return "wait: data";
    case detail::trace_unpack_begin: return "unpack";
  }
  return "signal";
}
#endif

}  // namespace

void enable(std::size_t device_events) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.env_checked = true;
  if (s.on) return;
  s.on = true;
#if HALOX_HAS_CUDA && HALOX_HAS_TRACING
  if (visible_gpus() > 0) {
    if (cudaMalloc(&s.device.records, device_events * sizeof(detail::DeviceRecord)) ==
        cudaSuccess) {
      // Zeroed: a slot no block wrote (an event a block did not have) reads t = 0, skipped.
      detail::fill_device_now(s.device.records, 0, device_events * sizeof(detail::DeviceRecord));
      s.device.capacity = device_events;
      s.reserved = 0;
      // Align the device's globaltimer with the host's realtime clock.
      s.device_offset_ns = detail::device_clock_offset_ns();
    } else {
      cudaGetLastError();
      s.device = {};
    }
  } else {
    cudaGetLastError();
  }
#else
  (void)device_events;
#endif
}

void disable() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.on = false;
  s.env_checked = true;
}

bool enabled() {
  State& s = state();
  if (!s.env_checked) {
    s.env_checked = true;
    if (detail::env_trace()) enable();
  }
  return s.on;
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.host.clear();
#if HALOX_HAS_CUDA
  if (s.device.records) {
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    detail::fill_device_now(s.device.records, 0, s.device.capacity * sizeof(detail::DeviceRecord));
    s.reserved = 0;
    s.launches.clear();
  }
#endif
}

Scope::Scope(const char* name, int rank) : m_name(name), m_rank(rank), m_begin(0), m_on(enabled()) {
  if (!m_on) return;
#if HALOX_HAS_CUDA
  nvtxRangePushA(name);
#endif
  m_begin = now_ns();
}

Scope::~Scope() {
  if (!m_on) return;
  const std::int64_t end = now_ns();
#if HALOX_HAS_CUDA
  nvtxRangePop();
#endif
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.host.size() >= kMaxHostEvents) s.host.pop_front();
  s.host.push_back({m_name, m_rank, "host", m_begin, end});
}

namespace {

// collect() with the device records put on the host clock by `device_offset_ns`.
std::vector<Event> collect_events(std::int64_t device_offset_ns) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<Event> out(s.host.begin(), s.host.end());
#if HALOX_HAS_CUDA
  if (s.device.records) {
    HALOX_CUDA_CHECK(cudaDeviceSynchronize());
    const unsigned long long n = std::min(s.reserved, s.device.capacity);
    std::vector<detail::DeviceRecord> ring(n);
    HALOX_CUDA_CHECK(cudaMemcpy(ring.data(), s.device.records, n * sizeof(detail::DeviceRecord),
                                cudaMemcpyDeviceToHost));
    // Each record's exchange object, from the launch that reserved its slot.
    std::vector<std::pair<detail::DeviceRecord, int>> records;
    for (unsigned long long i = 0; i < n; ++i) {
      // Slots reserved but not written (events a block did not have) are still zero.
      if (ring[i].t == 0) continue;
      const unsigned long long slot = detail::ring_slot(i, s.reserved, s.device.capacity);
      const auto launch =
          std::upper_bound(s.launches.begin(), s.launches.end(), slot,
                           [](unsigned long long v, const std::pair<unsigned long long, int>& l) {
                             return v < l.first;
                           });
      records.emplace_back(ring[i], launch == s.launches.begin() ? -1 : std::prev(launch)->second);
    }
    std::sort(records.begin(), records.end(),
              [](const auto& a, const auto& b) { return a.first.t < b.first.t; });
    // Pair each begin with the next end of the same (object, rank, direction, pulse, block,
    // kind).
    std::map<std::tuple<int, int, int, int, int, int>, unsigned long long> open;
    for (const auto& [r, object_id] : records) {
      const std::string object = object_id >= 0 && object_id < static_cast<int>(s.objects.size())
                                     ? s.objects[object_id]
                                     : std::string();
      const bool span = r.direction == detail::kStreamSpanDirection;
      const std::string track =
          span ? "gpu " + object
          : r.direction == 2
              ? "gpu grid op " + std::to_string(r.pulse) + " block " + std::to_string(r.block)
              : std::string(r.direction ? "gpu reverse" : "gpu forward") + " pulse " +
                    std::to_string(r.pulse) + " block " + std::to_string(r.block);
      const std::int64_t t = static_cast<std::int64_t>(r.t) + device_offset_ns;
      if (r.event == detail::trace_signal) {
        out.push_back({"signal sent", r.rank, track, t, t, r.exchange, object});
        continue;
      }
      const auto key =
          std::make_tuple(object_id, r.rank, int(r.direction), int(r.pulse), r.block, r.event / 2);
      if (r.event % 2 == 0) {
        open[key] = r.t;
      } else if (auto it = open.find(key); it != open.end()) {
        out.push_back({span ? object : event_name(r.event), r.rank, track,
                       static_cast<std::int64_t>(it->second) + device_offset_ns, t, r.exchange,
                       object});
        open.erase(it);
      }
    }
  }
#else
  (void)device_offset_ns;
#endif
  return out;
}

}  // namespace

namespace {
void stream_mark(const char* name, int rank, GpuStream stream, bool begin) {
#if HALOX_HAS_CUDA && HALOX_HAS_TRACING
  if (!enabled()) return;
  State& s = state();
  int object = -1, count = 0;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (auto it = s.span_objects.find(name); it != s.span_objects.end()) object = it->second;
  }
  if (object < 0) object = detail::trace_object(name);  // takes the lock itself
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.span_objects.emplace(name, object);
    int& begun = s.spans_begun[{name, rank}];
    count = begin ? begun++ : begun - 1;
  }
  const detail::DeviceTrace d = detail::device_trace(1, object);
  detail::record_on_stream(d, rank, begin ? detail::trace_span_begin : detail::trace_span_end,
                           count, stream);
#else
  (void)name, (void)rank, (void)stream, (void)begin;
#endif
}
}  // namespace

void stream_span_begin(const char* name, int rank, GpuStream stream) {
  stream_mark(name, rank, stream, true);
}
void stream_span_end(const char* name, int rank, GpuStream stream) {
  stream_mark(name, rank, stream, false);
}

std::vector<Event> collect() {
  return collect_events(state().device_offset_ns);
}

std::string to_chrome_json(const std::vector<Event>& events) {
  std::vector<Event> sorted = events;
  std::sort(sorted.begin(), sorted.end(), [](const Event& a, const Event& b) {
    return std::tie(a.rank, a.track, a.begin_ns, a.end_ns) <
           std::tie(b.rank, b.track, b.begin_ns, b.end_ns);
  });
  std::int64_t origin = 0;
  for (const auto& e : sorted) origin = origin ? std::min(origin, e.begin_ns) : e.begin_ns;
  std::map<std::pair<int, std::string>, int> tids;
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  out << "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
  bool first = true;
  auto comma = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (const auto& e : sorted) {
    auto key = std::make_pair(e.rank, e.track);
    auto it = tids.find(key);
    if (it == tids.end()) {
      const int tid = static_cast<int>(tids.size()) + 1;
      it = tids.emplace(key, tid).first;
      comma();
      out << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << e.rank
          << ", \"tid\": " << tid << ", \"args\": {\"name\": \"" << e.track << "\"}}";
    }
    comma();
    const double ts = (e.begin_ns - origin) / 1e3, dur = (e.end_ns - e.begin_ns) / 1e3;
    if (e.end_ns == e.begin_ns) {
      out << "{\"ph\": \"i\", \"s\": \"t\", \"name\": \"" << e.name << "\", \"pid\": " << e.rank
          << ", \"tid\": " << it->second << ", \"ts\": " << ts;
    } else {
      out << "{\"ph\": \"X\", \"name\": \"" << e.name << "\", \"pid\": " << e.rank
          << ", \"tid\": " << it->second << ", \"ts\": " << ts << ", \"dur\": " << dur;
    }
    if (e.exchange >= 0) {
      out << ", \"args\": {\"exchange\": " << e.exchange;
      if (!e.object.empty()) out << ", \"object\": \"" << json_escaped(e.object) << '"';
      out << "}";
    }
    out << "}";
  }
  std::map<int, bool> ranks;
  for (const auto& e : sorted) ranks[e.rank] = true;
  for (const auto& [rank, unused] : ranks) {
    comma();
    out << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << rank
        << ", \"args\": {\"name\": \"rank " << rank << "\"}}";
  }
  out << "\n]}\n";
  return out.str();
}

void write(const std::string& path) {
  std::ofstream out(path);
  out << to_chrome_json(collect());
  if (!out) throw Error("halox::trace::write: cannot write " + path);
}

#if HALOX_HAS_MPI
void write(MPI_Comm comm, const std::string& path) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Which clocks are shared: the host's realtime clock by the ranks of one node (as MPI's
  // shared-memory split sees nodes, like the rest of halox), a GPU's globaltimer by the
  // ranks on it. Key: the node's lowest rank, then the GPU's UUID (zeros: none).
  // The caller's communicator: bounded, but no roll call on it.
  const detail::NodeRanks node(comm, {rank, "", kPlanTimeoutSeconds, "trace::write"}, false, rank);
  const int node_leader = node.ranks_in(comm).front();  // ordered by rank: the lowest
  constexpr int kKeyBytes = sizeof(int) + 16;
  std::vector<char> keys(static_cast<std::size_t>(size) * kKeyBytes, 0);
  char* const my_key = keys.data() + static_cast<std::size_t>(rank) * kKeyBytes;
  std::memcpy(my_key, &node_leader, sizeof(int));
#if HALOX_HAS_CUDA
  int gpu = -1;
  cudaDeviceProp prop{};
  if (state().device.records && cudaGetDevice(&gpu) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, gpu) == cudaSuccess) {
    std::memcpy(my_key + sizeof(int), prop.uuid.bytes, 16);
  }
  cudaGetLastError();
#endif
  HALOX_MPI_CHECK(
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, keys.data(), kKeyBytes, MPI_CHAR, comm));
  auto key = [&](int r) { return keys.data() + static_cast<std::size_t>(r) * kKeyBytes; };
  auto same_node = [&](int a, int b) { return std::memcmp(key(a), key(b), sizeof(int)) == 0; };
  // Ranks on one GPU take the device offset of the lowest of them, so that their device
  // events keep the exact order the shared globaltimer gives them (each rank's own offset
  // is only good to about a microsecond: a launch and a copy back).
  std::vector<std::int64_t> device_offsets(size);
  device_offsets[rank] = state().device_offset_ns;
  HALOX_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, device_offsets.data(), 1,
                                MPI_INT64_T, comm));
  std::int64_t device_offset = device_offsets[rank];
  for (int r = 0; r < rank; ++r) {
    if (std::memcmp(key(r), my_key, kKeyBytes) == 0) {
      device_offset = device_offsets[r];
      break;
    }
  }
  // Host clock offsets to rank 0: none on rank 0's node (one realtime clock), from a ping
  // per rank elsewhere.
  std::int64_t offset = 0;
  for (int r = 1; r < size; ++r) {
    if (same_node(0, r)) continue;
    if (rank == 0) {
      const std::int64_t sent = now_ns();
      std::int64_t theirs = 0;
      HALOX_MPI_CHECK(MPI_Send(&sent, 1, MPI_INT64_T, r, 8800, comm));
      HALOX_MPI_CHECK(MPI_Recv(&theirs, 1, MPI_INT64_T, r, 8801, comm, MPI_STATUS_IGNORE));
      const std::int64_t back = now_ns(), off = theirs - (sent + back) / 2;
      HALOX_MPI_CHECK(MPI_Send(&off, 1, MPI_INT64_T, r, 8802, comm));
    } else if (rank == r) {
      std::int64_t sent = 0;
      HALOX_MPI_CHECK(MPI_Recv(&sent, 1, MPI_INT64_T, 0, 8800, comm, MPI_STATUS_IGNORE));
      const std::int64_t mine = now_ns();
      HALOX_MPI_CHECK(MPI_Send(&mine, 1, MPI_INT64_T, 0, 8801, comm));
      HALOX_MPI_CHECK(MPI_Recv(&offset, 1, MPI_INT64_T, 0, 8802, comm, MPI_STATUS_IGNORE));
    }
  }
  std::ostringstream lines;
  for (const auto& e : collect_events(device_offset)) {
    lines << e.rank << '\t' << e.track << '\t' << e.name << '\t' << e.begin_ns - offset << '\t'
          << e.end_ns - offset << '\t' << e.exchange << '\t' << e.object << '\n';
  }
  const std::string mine = lines.str();
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size), displs(size);
  HALOX_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += lengths[r];
  }
  std::string all(rank == 0 ? total : 0, '\0');
  HALOX_MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                              displs.data(), MPI_CHAR, 0, comm));
  if (rank != 0) return;
  std::vector<Event> events;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    Event e;
    std::string r, b, t, x;
    std::getline(f, r, '\t');
    std::getline(f, e.track, '\t');
    std::getline(f, e.name, '\t');
    std::getline(f, b, '\t');
    std::getline(f, t, '\t');
    std::getline(f, x, '\t');
    std::getline(f, e.object, '\t');
    e.rank = std::stoi(r);
    e.begin_ns = std::stoll(b);
    e.end_ns = std::stoll(t);
    e.exchange = std::stoll(x);
    events.push_back(e);
  }
  std::ofstream out(path);
  out << to_chrome_json(events);
  if (!out) throw Error("halox::trace::write: cannot write " + path);
}
#endif

}  // namespace trace

namespace detail {
DeviceTrace device_trace(unsigned long long blocks, int object) {
  if (!trace::enabled()) return {};
  trace::State& s = trace::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  DeviceTrace d = s.device;
  d.base = s.reserved;
  if (blocks > 0 && d.records != nullptr) {
    s.launches.emplace_back(s.reserved, object);
    // The oldest launch's slots are all overwritten once the next one's start is.
    while (s.launches.size() > 1 && s.launches[1].first + d.capacity <= s.reserved)
      s.launches.pop_front();
  }
  s.reserved += blocks * kTraceSlots;
  return d;
}

unsigned long long ring_slot(unsigned long long index, unsigned long long reserved,
                             unsigned long long capacity) {
  if (capacity == 0) return index;  // no ring
  const unsigned long long oldest = reserved > capacity ? reserved - capacity : 0;
  return oldest + (index + capacity - oldest % capacity) % capacity;
}

int trace_object(const std::string& name) {
  trace::State& s = trace::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int id = static_cast<int>(s.objects.size());
  // No tabs or line ends: write(comm) sends events as tab-separated lines.
  std::string clean = name;  // (appended, not `"#" + to_string`: GCC 12 warns -Wrestrict)
  if (clean.empty()) clean.append("#").append(std::to_string(id));
  std::replace_if(
      clean.begin(), clean.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
  s.objects.push_back(clean);
  return id;
}
}  // namespace detail

}  // namespace halox
