#include "state.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "halox/error.hpp"
#include "halox/mpi.hpp"
#include "halox/pack.hpp"
#include "protocol.hpp"

namespace halox::mpi {

namespace {

std::mutex& types_mutex() {
  static std::mutex m;
  return m;
}

int delete_import(MPI_Datatype, int, void* value, void*) {
  delete static_cast<std::shared_ptr<const Datatype>*>(value);
  return MPI_SUCCESS;
}

int import_keyval() {  // under types_mutex
  static int keyval = MPI_KEYVAL_INVALID;
  if (keyval == MPI_KEYVAL_INVALID) {
    PMPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, delete_import, &keyval, nullptr);
  }
  return keyval;
}

}  // namespace

std::shared_ptr<const Datatype> imported(MPI_Datatype type) {
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner);
  std::lock_guard<std::mutex> lock(types_mutex());
  if (combiner == MPI_COMBINER_NAMED) {
    static std::unordered_map<MPI_Datatype, std::shared_ptr<const Datatype>> named;
    auto& slot = named[type];
    if (!slot) slot = std::make_shared<const Datatype>(from_mpi(type));
    return slot;
  }
  const int keyval = import_keyval();
  void* value = nullptr;
  int found = 0;
  PMPI_Type_get_attr(type, keyval, &value, &found);
  if (found) return *static_cast<std::shared_ptr<const Datatype>*>(value);
  auto* cached =
      new std::shared_ptr<const Datatype>(std::make_shared<const Datatype>(from_mpi(type)));
  PMPI_Type_set_attr(type, keyval, cached);
  return *cached;
}

namespace {

std::mutex& requests_mutex() {
  static std::mutex m;
  return m;
}
// Keyed by the MPI library's handle, which it reuses once a request completes: a wait holds
// the entries of its requests from before its call (owed()), so that a request another
// thread starts meanwhile under the same handle is not taken for one of them.
std::unordered_map<MPI_Request, std::shared_ptr<Pending>>& requests() {
  static std::unordered_map<MPI_Request, std::shared_ptr<Pending>> table;
  return table;
}
std::vector<std::pair<MPI_Request, std::shared_ptr<Pending>>>& detached() {  // under the mutex
  static std::vector<std::pair<MPI_Request, std::shared_ptr<Pending>>> list;
  return list;
}
std::atomic<bool> any_tracked{false};
std::atomic<int> note_receives{0};      // tracked receives that can get a note
std::atomic<int> ipc_sends{0};          // sends awaiting an acknowledgement
std::atomic<bool> any_detached{false};  // every wait asks: a lock only when there are some

}  // namespace

// The note a host receive got: its first kNoteBytes packed bytes, read back from its buffer.
std::vector<char> note_in_host_buffer(const Pending& p) {
  const std::int64_t size = p.type->size();
  const std::int64_t elements = std::min<std::int64_t>(p.count, (kNoteBytes + size - 1) / size);
  std::vector<char> bytes(static_cast<std::size_t>(elements * size));
  pack(p.buffer, elements, *p.type, bytes.data());
  return bytes;
}

int unpack_received(const Pending& p, MPI_Status& status) {
  int cancelled = 0;
  PMPI_Test_cancelled(&status, &cancelled);
  if (cancelled) return MPI_SUCCESS;
  if (p.served) {
    status = p.served_status;
    return p.served_rc;
  }
  int bytes = 0;
  PMPI_Get_count(&status, MPI_BYTE, &bytes);
  if (p.notes && bytes == kNoteBytes) {
    if (p.memory == Memory::host) return serve(p, note_in_host_buffer(p).data(), status);
    return serve(p, p.staging.data(), status);
  }
  if (bytes == MPI_UNDEFINED || bytes <= 0 || p.memory == Memory::host) return MPI_SUCCESS;
  const std::int64_t holds = p.count * p.type->size();
  try {
    unpack_from_host(p.staging.data(), std::min<std::int64_t>(bytes, holds), p.buffer, p.count,
                     *p.type, p.memory);
  } catch (const std::exception& e) {
    return raise(MPI_COMM_WORLD, std::string("halox_mpi: a staged receive's copy to the device "
                                             "failed: ") +
                                     e.what());
  }
  tally(Path::staged_receive, bytes);
  return MPI_SUCCESS;
}

void track(MPI_Request request, Pending pending) {
  std::lock_guard<std::mutex> lock(requests_mutex());
  if (pending.notes) ++note_receives;
  if (pending.awaits_ack) ++ipc_sends;
  requests()[request] = std::make_shared<Pending>(std::move(pending));
  any_tracked = true;
}

bool tracking() {
  return any_tracked.load(std::memory_order_relaxed);
}

bool is_tracked(MPI_Request request, int* persistent) {
  std::lock_guard<std::mutex> lock(requests_mutex());
  auto it = requests().find(request);
  if (it == requests().end()) return false;
  *persistent = it->second->persistent;
  return true;
}

void before_start(MPI_Request request) {
  std::lock_guard<std::mutex> lock(requests_mutex());
  auto it = requests().find(request);
  if (it == requests().end() || it->second->receive) return;
  Pending& p = *it->second;
  if (p.protocol_send) {
    restart_note(p);
    return;
  }
  pack_to_host(p.buffer, p.count, *p.type, p.staging.data(), p.memory);
  tally(Path::staged_send, p.count * p.type->size());
}

std::vector<std::shared_ptr<Pending>> owed(const std::vector<MPI_Request>& handles) {
  std::vector<std::shared_ptr<Pending>> owes(handles.size());
  std::lock_guard<std::mutex> lock(requests_mutex());
  for (std::size_t i = 0; i < handles.size(); ++i) {
    if (handles[i] == MPI_REQUEST_NULL) continue;
    auto it = requests().find(handles[i]);
    if (it != requests().end()) owes[i] = it->second;
  }
  return owes;
}

std::shared_ptr<Pending> owed(MPI_Request request) {
  if (request == MPI_REQUEST_NULL) return nullptr;
  std::lock_guard<std::mutex> lock(requests_mutex());
  auto it = requests().find(request);
  return it == requests().end() ? nullptr : it->second;
}

// Drops `request`'s entry if it is still `pending` (under the mutex).
void untrack(MPI_Request request, const std::shared_ptr<Pending>& pending) {
  auto it = requests().find(request);
  if (it == requests().end() || (pending && it->second != pending)) return;
  if (it->second->notes) --note_receives;
  if (it->second->awaits_ack) --ipc_sends;
  requests().erase(it);
  any_tracked = !requests().empty();
}

int completed(MPI_Request request, const std::shared_ptr<Pending>& pending, MPI_Status& status) {
  if (!pending) return MPI_SUCCESS;
  if (!pending->persistent) {
    std::lock_guard<std::mutex> lock(requests_mutex());
    untrack(request, pending);
  }
  if (!pending->receive) {
    // A protocol send's note is delivered once its acknowledgement or side bytes are.
    if (!pending->protocol_send) return MPI_SUCCESS;
    int rc = MPI_SUCCESS;
    for (MPI_Request& r : pending->chunk_sends) {  // a chunked send's other chunks
      const int done = wait_serving(&r, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS) rc = done;
    }
    const int delivered = wait_serving(&pending->note_request, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? delivered : rc;
  }
  const int rc = unpack_received(*pending, status);
  if (pending->persistent) {  // starts afresh (its handle stays valid while inactive)
    pending->served = false;
    pending->done = false;
  }
  return rc;
}

void forget(MPI_Request request) {
  std::lock_guard<std::mutex> progress(progress_mutex());  // progress sees it done, then gone
  std::lock_guard<std::mutex> lock(requests_mutex());
  auto it = requests().find(request);
  if (it != requests().end()) it->second->done = true;
  untrack(request, nullptr);
}

std::mutex& progress_mutex() {
  static std::mutex m;
  return m;
}

bool acks_awaited() {
  return ipc_sends.load(std::memory_order_relaxed) > 0;
}

AwaitingAck::AwaitingAck() {
  ++ipc_sends;
}
AwaitingAck::~AwaitingAck() {
  --ipc_sends;
}

void Serving::meanwhile() {
  if (acks_awaited()) {
    progress_receives();
    return;
  }
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  if (m_last == 0) m_last = now;  // the call's first test: nothing yet
  if (now - m_last < 20000) return;
  m_last = now;
  progress_receives();
}

bool receives_to_serve() {
  return note_receives.load(std::memory_order_relaxed) > 0;
}

void progress_receives() {
  if (!receives_to_serve()) return;
  std::vector<std::pair<MPI_Request, std::shared_ptr<Pending>>> candidates;
  {
    std::lock_guard<std::mutex> lock(requests_mutex());
    for (const auto& [request, pending] : requests())
      if (pending->notes && !pending->served && !pending->done)
        candidates.emplace_back(request, pending);
  }
  std::lock_guard<std::mutex> lock(progress_mutex());
  ServeBatch batch;  // closed (the copies waited for, acknowledgements sent) before the lock
  std::vector<std::shared_ptr<Pending>> served;
  for (auto& [request, pending] : candidates) {
    if (pending->done) continue;  // a test completed it meanwhile: its handle is gone
    int flag = 0;
    MPI_Status status;
    if (PMPI_Request_get_status(request, &flag, &status) != MPI_SUCCESS || !flag) continue;
    int bytes = 0, cancelled = 0;
    PMPI_Test_cancelled(&status, &cancelled);
    PMPI_Get_count(&status, MPI_BYTE, &bytes);
    if (cancelled || bytes != kNoteBytes) continue;
    pending->served_rc = unpack_received(*pending, status);
    pending->served_status = status;
    pending->served = true;
    served.push_back(pending);
  }
  if (const int flushed = batch.close(); flushed != MPI_SUCCESS)
    for (auto& pending : served)
      if (pending->served_rc == MPI_SUCCESS) pending->served_rc = flushed;
}

void detach(MPI_Request request) {
  auto pending = owed(request);
  std::lock_guard<std::mutex> lock(requests_mutex());
  detached().emplace_back(request, std::move(pending));
  any_detached = true;
}

void progress_detached(bool all) {
  if (!any_detached.load(std::memory_order_relaxed)) return;
  std::vector<std::pair<MPI_Request, std::shared_ptr<Pending>>> list, left;
  {
    std::lock_guard<std::mutex> lock(requests_mutex());
    list.swap(detached());
  }
  for (auto& [request, pending] : list) {
    const MPI_Request handle = request;
    MPI_Status status;
    int done = 0;
    if (all) {
      wait_serving(&request, &status);  // a peer may wait for a note served here meanwhile
      done = 1;
    } else {
      std::lock_guard<std::mutex> progress(progress_mutex());
      PMPI_Test(&request, &done, &status);
    }
    if (done) {
      pending->done = true;
      completed(handle, pending, status);
    } else {
      left.emplace_back(request, std::move(pending));
    }
  }
  std::lock_guard<std::mutex> lock(requests_mutex());
  for (auto& entry : left) detached().push_back(std::move(entry));
  any_detached = !detached().empty();
}

namespace {

struct Counter {
  std::atomic<long long> messages{0}, bytes{0};
};
constexpr int kPaths = 11;
Counter counters[kPaths];
const char* const kPathNames[kPaths] = {
    "host send (passed through)", "staged send",           "staged receive",
    "staged collective",          "ipc send (peer reads)", "ipc receive (read peer)",
    "ipc mappings opened",        "ipc mappings reopened", "neighbour collective (halox)",
    "chunked send (pipeline)",    "chunked receive"};
static_assert(static_cast<int>(Path::chunked_receive) + 1 == kPaths);

}  // namespace

bool reporting() {
  return knobs().report;
}

namespace {
std::atomic<long long> waited_ns{0};
thread_local int waiting_depth = 0;
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Waiting::Waiting() {
  if (reporting() && waiting_depth++ == 0) m_start = now_ns();
}

Waiting::~Waiting() {
  if (!reporting()) return;
  --waiting_depth;
  if (m_start >= 0) waited_ns.fetch_add(now_ns() - m_start, std::memory_order_relaxed);
}

void tally(Path path, std::int64_t bytes) {
  if (!reporting()) return;
  Counter& c = counters[static_cast<int>(path)];
  c.messages.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void count_host(int n, MPI_Datatype type) {
  int size = 0;
  PMPI_Type_size(type, &size);
  tally(Path::host, static_cast<std::int64_t>(n) * size);
}

void print_report() {
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  long long mine[2 * kPaths], total[2 * kPaths];
  for (int p = 0; p < kPaths; ++p) {
    mine[2 * p] = counters[p].messages.load();
    mine[2 * p + 1] = counters[p].bytes.load();
  }
  PMPI_Reduce(mine, total, 2 * kPaths, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  const long long waited = waited_ns.load();
  long long waits[2] = {0, 0};  // the most one rank waited, the sum over ranks
  PMPI_Reduce(&waited, &waits[0], 1, MPI_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  PMPI_Reduce(&waited, &waits[1], 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  std::fprintf(stderr, "halox_mpi report (%d ranks; messages and bytes summed over ranks):\n",
               size);
  std::fprintf(stderr, "  %-24s %12s %16s\n", "path", "messages", "bytes");
  for (int p = 0; p < kPaths; ++p) {
    std::fprintf(stderr, "  %-24s %12lld %16lld\n", kPathNames[p], total[2 * p], total[2 * p + 1]);
  }
  std::fprintf(stderr,
               "  time waited in blocking calls: %.6f s on the rank that waited most, %.6f s "
               "summed over ranks\n",
               static_cast<double>(waits[0]) * 1e-9, static_cast<double>(waits[1]) * 1e-9);
}

int raise(MPI_Comm comm, const std::string& text) {
  static std::mutex m;
  static std::map<std::string, int> codes;
  int code = MPI_ERR_OTHER;
  {
    std::lock_guard<std::mutex> lock(m);
    auto it = codes.find(text);
    if (it != codes.end()) {
      code = it->second;
    } else {
      int error_class = 0;
      if (MPI_Add_error_class(&error_class) == MPI_SUCCESS &&
          MPI_Add_error_code(error_class, &code) == MPI_SUCCESS) {
        MPI_Add_error_string(code, text.c_str());
        codes[text] = code;
      }
    }
  }
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
  return code;
}

}  // namespace halox::mpi
