#include "protocol.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "calls.hpp"
#include "halox/error.hpp"
#include "halox/pack.hpp"

namespace halox::mpi {

namespace {

struct Channel {
  bool on = false;
  bool ipc = false;  // HALOX_MPI_IPC: peers on this node read device messages themselves
  MPI_Comm side = MPI_COMM_NULL;
  int rank = 0;            // in MPI_COMM_WORLD
  std::vector<char> near;  // per world rank: shares this node
  int tag_pairs = 1;       // side tags 2s and 2s + 1 for sequence number s (mod this)
  std::unique_ptr<std::atomic<std::uint64_t>[]> next;  // per world rank: its next sequence
};
Channel& channel() {
  static Channel c;
  return c;
}

// MPI_Comm_create_group's tag for the side channel (MPI_COMM_WORLD's tag space in Open MPI 4.1;
// its messages are all received before MPI_Init returns on any rank).
constexpr int kSideChannelCreateTag = 7411;

int data_tag(std::uint64_t seq) {
  return static_cast<int>(2 * (seq % static_cast<std::uint64_t>(channel().tag_pairs)));
}
int ack_tag(std::uint64_t seq) {
  return data_tag(seq) + 1;
}

// ---- A communicator's ranks in MPI_COMM_WORLD (the side channel's), cached on it ----

std::mutex& ranks_mutex() {
  static std::mutex m;
  return m;
}
int delete_ranks(MPI_Comm, int, void* value, void*) {
  delete static_cast<std::vector<int>*>(value);
  return MPI_SUCCESS;
}

int world_rank(MPI_Comm comm, int rank) {
  if (comm == MPI_COMM_WORLD) return rank;
  std::lock_guard<std::mutex> lock(ranks_mutex());
  static int keyval = MPI_KEYVAL_INVALID;
  if (keyval == MPI_KEYVAL_INVALID)
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_ranks, &keyval, nullptr);
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, keyval, &value, &found);
  if (!found) {
    int inter = 0, size = 0;
    MPI_Group group, world;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) {
      PMPI_Comm_remote_group(comm, &group);
    } else {
      PMPI_Comm_group(comm, &group);
    }
    PMPI_Comm_group(MPI_COMM_WORLD, &world);
    PMPI_Group_size(group, &size);
    std::vector<int> ranks(static_cast<std::size_t>(size));
    auto* worlds = new std::vector<int>(ranks.size());
    for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
    PMPI_Group_translate_ranks(group, size, ranks.data(), world, worlds->data());
    PMPI_Group_free(&group);
    PMPI_Group_free(&world);
    PMPI_Comm_set_attr(comm, keyval, worlds);
    value = worlds;
  }
  return (*static_cast<std::vector<int>*>(value))[static_cast<std::size_t>(rank)];
}

bool buffered(const SendMode& mode) {
  return std::strcmp(mode.name, "MPI_Bsend") == 0;
}

// The message's bytes where the note says they are: for a side note packed into staging, for
// an ipc note exported (the user's buffer, or a packed copy). False when they cannot be
// exported (the message is then staged).
bool load(Pending& p, MPI_Datatype type) {
  Note note;
  std::memcpy(&note, p.note.data(), sizeof(note));
  if (note.kind == NoteKind::side) {
    if (p.memory != Memory::host) {
      pack_to_host(p.buffer, p.count, *p.type, p.staging.data(), p.memory);
    } else if (p.type) {
      pack(p.buffer, p.count, *p.type, p.staging.data());
    } else {
      int at = 0;  // a type halox does not import: the library packs it
      PMPI_Pack(p.buffer, static_cast<int>(p.count), type, p.staging.data(), kNoteBytes, &at,
                MPI_COMM_SELF);
    }
    return true;
  }
  const void* from = address(p.buffer, p.type->true_lb());
  if (contiguous_layout(p.count, *p.type)) {
    settle(p.memory);  // the peer reads the buffer as soon as the note arrives
  } else {
    // Packed on the staging stream, which waits for the legacy default stream as settle()
    // does; the peer's copy waits for the pack's event (where there is one).
    if (!p.peer.data()) p.peer = PeerStaging(static_cast<std::size_t>(note.bytes), p.memory);
    if (p.ready.empty()) p.ready = ReadyEvent(p.memory);
    pack_to_peer_staging(p.buffer, p.count, *p.type, p.peer.data(), p.memory, p.ready);
    from = p.peer.data();
    note.ready = p.ready.empty() ? 0 : 1;
    if (note.ready) std::memcpy(note.ready_event, p.ready.handle(), sizeof(note.ready_event));
  }
  if (!export_memory(from, p.memory, &note.where)) return false;
  std::memcpy(p.note.data(), &note, sizeof(note));
  return true;
}

}  // namespace

std::int64_t chunked_from() {
  return knobs().tuned_chunk > 0 ? knobs().tuned_chunked_from : kChunkedFrom;
}

std::int64_t chunk_bytes(std::int64_t message_bytes) {
  const std::int64_t fewest = (message_bytes + kMostChunks - 1) / kMostChunks;
  if (knobs().tuned_chunk > 0) return std::max(knobs().tuned_chunk, fewest);
  const std::int64_t quarter = (message_bytes / 4) & ~std::int64_t{1023};
  return std::max(std::clamp<std::int64_t>(quarter, 512 << 10, 1 << 20), fewest);
}

namespace {

// Every rank's node, kNodeName bytes each (collective): its processor name and the kernel's
// boot id, so that ranks count as one node only where both agree (containers of one host
// with names of their own stay apart, and hosts that share a name too).
constexpr std::size_t kNodeName = MPI_MAX_PROCESSOR_NAME + 40;
std::vector<char> node_names(int size) {
  char mine[kNodeName] = {};
  int length = 0;
  PMPI_Get_processor_name(mine, &length);
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (std::fgets(mine + MPI_MAX_PROCESSOR_NAME, 40, f) == nullptr)
      mine[MPI_MAX_PROCESSOR_NAME] = '\0';
    std::fclose(f);
  }
  std::vector<char> all(static_cast<std::size_t>(size) * kNodeName);
  PMPI_Allgather(mine, static_cast<int>(kNodeName), MPI_CHAR, all.data(),
                 static_cast<int>(kNodeName), MPI_CHAR, MPI_COMM_WORLD);
  return all;
}

}  // namespace

int protocol_init() {
  Channel& c = channel();
  const int mine = knobs().ipc ? 1 : 0;
  int both[2] = {mine, -mine}, agreed[2] = {0, 0};
  PMPI_Allreduce(both, agreed, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (agreed[0] != -agreed[1]) return 1;  // some rank said HALOX_MPI_IPC=0, some did not
  c.ipc = mine != 0;
  int size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  // Neither MPI_Comm_dup nor MPI_Comm_split_type: Open MPI 4.1 agrees on their new
  // communicator's id by a nonblocking allreduce over MPI_COMM_WORLD, after which libnbc's
  // progress function runs in every poll of the library for the rest of the run, a host
  // program's messages included. MPI_Comm_create_group agrees by point-to-point messages (done
  // before any rank leaves MPI_Init), and the node is told by names (node_names).
  MPI_Group world;
  PMPI_Comm_group(MPI_COMM_WORLD, &world);
  PMPI_Comm_create_group(MPI_COMM_WORLD, world, kSideChannelCreateTag, &c.side);
  PMPI_Group_free(&world);
  const std::vector<char> nodes = node_names(size);
  const char* const mine_node = nodes.data() + static_cast<std::size_t>(c.rank) * kNodeName;
  c.near.assign(static_cast<std::size_t>(size), 0);
  if (c.ipc) {
    for (int w = 0; w < size; ++w) {
      const char* node = nodes.data() + static_cast<std::size_t>(w) * kNodeName;
      c.near[static_cast<std::size_t>(w)] = std::memcmp(node, mine_node, kNodeName) == 0;
    }
  }
  void* ub = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  c.tag_pairs = found ? std::max(1, *static_cast<int*>(ub) / 2) : 16383;
  c.next = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(size));
  c.on = true;
  return 0;
}

void protocol_finalize() {
  Channel& c = channel();
  if (!c.on) return;
  c.on = false;
  PMPI_Comm_free(&c.side);
}

bool protocol_on() {
  return channel().on;
}

bool all_near(MPI_Comm comm) {
  const Channel& c = channel();
  if (!c.on || !c.ipc) return false;
  int size = 0;
  PMPI_Comm_size(comm, &size);
  for (int r = 0; r < size; ++r) {
    if (!c.near[static_cast<std::size_t>(world_rank(comm, r))]) return false;
  }
  return true;
}

namespace {

// What every protocol send keeps (its buffer, peer and mode) and the header of its note, the
// next sequence number to `world`; the caller adds its kind's part and stores the note.
Pending protocol_send_of(const SendMode& mode, const void* buffer, int count, Memory memory,
                         int dest, int tag, MPI_Comm comm, bool persistent) {
  Pending p;
  p.protocol_send = true;
  p.persistent = persistent;
  p.buffer = const_cast<void*>(buffer);
  p.count = count;
  p.memory = memory;
  p.comm = comm;
  p.mode = &mode;
  p.dest = dest;
  p.tag = tag;
  return p;
}
Note note_of(NoteKind kind, Memory memory, std::int64_t bytes, int world) {
  Channel& c = channel();
  Note note;
  note.kind = kind;
  note.sender = c.rank;
  note.memory = static_cast<std::int32_t>(memory);
  note.bytes = bytes;
  note.seq = c.next[static_cast<std::size_t>(world)]++;
  return note;
}

// A chunked note's chunks but the last sent, each as soon as its copy to the host is done
// (the last is the user's request's); the note first. While a chunk's copy runs, the sends
// made so far are tested: an MPI library may move a large message's bytes only inside its
// calls, and without that the chunks moved after the last copy (4 MiB with IPC off on an
// H200: 790 us untested, 705 tested).
void send_chunks(Pending& p, const Note& note, int world) {
  Channel& c = channel();
  p.chunk_sends.clear();  // a restart's: completed (and nulled) at the last start's wait
  const int noted =
      p.mode->start(p.note.data(), kNoteBytes, MPI_BYTE, p.dest, p.tag, p.comm, &p.note_request);
  if (noted != MPI_SUCCESS) throw Error("the note of a chunked message could not be sent");
  pack_to_host_in_chunks(
      p.buffer, p.count, *p.type, p.staging.data(), p.memory, note.chunk,
      [&](std::int64_t lo, std::int64_t n) {
        if (lo + n == note.bytes) return;  // the user's request sends it
        MPI_Request& r = p.chunk_sends.emplace_back(MPI_REQUEST_NULL);
        const int sent = PMPI_Isend(p.staging.data() + lo, static_cast<int>(n), MPI_BYTE, world,
                                    data_tag(note.seq), c.side, &r);
        if (sent != MPI_SUCCESS)
          throw Error("a chunk's send failed (MPI error " + std::to_string(sent) + ")");
      },
      [&] {
        int all = 0;
        if (p.chunk_sends.empty()) return;
        const int tested = PMPI_Testall(static_cast<int>(p.chunk_sends.size()),
                                        p.chunk_sends.data(), &all, MPI_STATUSES_IGNORE);
        if (tested != MPI_SUCCESS)
          throw Error("a chunk's send failed (MPI error " + std::to_string(tested) + ")");
      });
  tally(Path::chunked_send, note.bytes);
}

// A chunked note's send (NoteKind::chunks): the note on the user's (dest, tag, comm), then the
// chunks on the side channel (send_chunks). The user's request is the last chunk's send
// (persistent: its Send_init, the note and the other chunks sent again at each MPI_Start);
// the note's and the other chunks' requests are waited for at its completion. A blocking
// send waits for them all, serving notes meanwhile.
bool send_in_chunks(const SendMode& mode, const void* buffer, int count, MPI_Datatype type,
                    int dest, int world, int tag, MPI_Comm comm, MPI_Request* request,
                    bool persistent, Memory memory, std::int64_t bytes, int* rc) {
  Channel& c = channel();
  Pending p = protocol_send_of(mode, buffer, count, memory, dest, tag, comm, persistent);
  p.type = imported(type);
  Note note = note_of(NoteKind::chunks, memory, bytes, world);
  note.chunk = chunk_bytes(bytes);
  p.note.assign(kNoteBytes, 0);
  std::memcpy(p.note.data(), &note, sizeof(note));
  p.staging = Staging(static_cast<std::size_t>(bytes));
  const std::int64_t last = (bytes - 1) / note.chunk * note.chunk;  // the last chunk's offset
  const int last_bytes = static_cast<int>(bytes - last);
  if (persistent) {
    *rc = PMPI_Send_init(p.staging.data() + last, last_bytes, MPI_BYTE, world, data_tag(note.seq),
                         c.side, request);
    if (*rc == MPI_SUCCESS) track(*request, std::move(p));  // the rest at each MPI_Start
    return true;
  }
  send_chunks(p, note, world);
  MPI_Request user = MPI_REQUEST_NULL;
  *rc = PMPI_Isend(p.staging.data() + last, last_bytes, MPI_BYTE, world, data_tag(note.seq), c.side,
                   &user);
  if (*rc != MPI_SUCCESS) return true;
  if (request) {
    *request = user;
    track(user, std::move(p));
    return true;
  }
  *rc = wait_serving(&user, MPI_STATUS_IGNORE);
  for (MPI_Request& r : p.chunk_sends) {
    const int done = wait_serving(&r, MPI_STATUS_IGNORE);
    if (*rc == MPI_SUCCESS) *rc = done;
  }
  const int delivered = wait_serving(&p.note_request, MPI_STATUS_IGNORE);
  if (*rc == MPI_SUCCESS) *rc = delivered;
  return true;
}

}  // namespace

bool send_with_note(const SendMode& mode, const void* buffer, int count, MPI_Datatype type,
                    int dest, int tag, MPI_Comm comm, MPI_Request* request, bool persistent,
                    Memory memory, std::int64_t bytes, int* rc) {
  Channel& c = channel();
  const bool side = bytes == kNoteBytes;
  if (!c.on || dest == MPI_PROC_NULL) return false;
  const int world = world_rank(comm, dest);
  // A message to this process itself is staged: CUDA IPC cannot map a process's own memory.
  if (!side && (memory == Memory::host || bytes < kNoteBytes || buffered(mode) ||
                (world == c.rank && memory == Memory::device)))
    return false;
  if (!side && !c.near[static_cast<std::size_t>(world)]) {
    // No IPC to this peer: large messages chunked, the others staged whole.
    if (bytes < chunked_from() || world == c.rank) return false;
    return send_in_chunks(mode, buffer, count, type, dest, world, tag, comm, request, persistent,
                          memory, bytes, rc);
  }
  Pending p = protocol_send_of(mode, buffer, count, memory, dest, tag, comm, persistent);
  p.awaits_ack = !side;
  try {
    p.type = imported(type);
  } catch (const DatatypeError&) {
    if (memory != Memory::host || persistent) throw;  // a host message the library packs
  }
  Note note = note_of(side ? NoteKind::side : NoteKind::ipc, memory, bytes, world);
  p.note.assign(kNoteBytes, 0);
  std::memcpy(p.note.data(), &note, sizeof(note));
  if (side) p.staging = Staging(kNoteBytes);
  if (!persistent && !load(p, type)) return false;
  if (persistent && !side) {
    Exported probe;  // whether it can be exported at all, before promising the protocol
    if (!export_memory(address(buffer, p.type->true_lb()), memory, &probe) &&
        contiguous_layout(count, *p.type))
      return false;
  }
  if (!persistent) tally(side ? Path::staged_send : Path::ipc_send, bytes);  // else at each start
  if (persistent) {
    // The user's request: the side bytes' send or the acknowledgement's receive, on a
    // sequence number of its own; the note goes at each MPI_Start (restart_note).
    *rc = side ? PMPI_Send_init(p.staging.data(), kNoteBytes, MPI_BYTE, world, data_tag(note.seq),
                                c.side, request)
               : PMPI_Recv_init(nullptr, 0, MPI_BYTE, world, ack_tag(note.seq), c.side, request);
    if (*rc == MPI_SUCCESS) track(*request, std::move(p));
    return true;
  }
  MPI_Request user = MPI_REQUEST_NULL;
  if (!side) {
    *rc = PMPI_Irecv(nullptr, 0, MPI_BYTE, world, ack_tag(note.seq), c.side, &user);
    if (*rc != MPI_SUCCESS) return true;
  }
  *rc = mode.start(p.note.data(), kNoteBytes, MPI_BYTE, dest, tag, comm, &p.note_request);
  if (*rc != MPI_SUCCESS) return true;
  if (side) {
    *rc = PMPI_Isend(p.staging.data(), kNoteBytes, MPI_BYTE, world, data_tag(note.seq), c.side,
                     &user);
    if (*rc != MPI_SUCCESS) return true;
  }
  if (request) {
    *request = user;
    track(user, std::move(p));
    return true;
  }
  {
    const AwaitingAck awaiting;  // served eagerly meanwhile: the peer may be in the same wait
    *rc = wait_serving(&user, MPI_STATUS_IGNORE);
  }
  const int delivered = wait_serving(&p.note_request, MPI_STATUS_IGNORE);
  if (*rc == MPI_SUCCESS) *rc = delivered;
  return true;
}

void restart_note(Pending& p) {
  Note chunked;
  std::memcpy(&chunked, p.note.data(), sizeof(chunked));
  if (chunked.kind == NoteKind::chunks) {
    send_chunks(p, chunked, world_rank(p.comm, p.dest));
    return;
  }
  if (!load(p, MPI_DATATYPE_NULL))
    throw Error(
        "halox_mpi: MPI_Start: the buffer of a persistent send can no longer be "
        "exported to its peer");
  Note note;
  std::memcpy(&note, p.note.data(), sizeof(note));
  tally(note.kind == NoteKind::side ? Path::staged_send : Path::ipc_send, note.bytes);
  const int rc =
      p.mode->start(p.note.data(), kNoteBytes, MPI_BYTE, p.dest, p.tag, p.comm, &p.note_request);
  if (rc != MPI_SUCCESS) throw Error("halox_mpi: MPI_Start: the note could not be sent");
}

namespace {

// The bytes a side note promised: its sender sends them right after the note, so a wait past
// HALOX_MPI_TIMEOUT means that sender stalled or died; said once, naming both ranks.
int receive_promised(char* into, const Note& note, Channel& c) {
  MPI_Request request;
  int rc =
      PMPI_Irecv(into, kNoteBytes, MPI_BYTE, note.sender, data_tag(note.seq), c.side, &request);
  if (rc != MPI_SUCCESS) return rc;
  if (poll_bounded([&] {
        int flag = 0;
        rc = PMPI_Test(&request, &flag, MPI_STATUS_IGNORE);
        return rc != MPI_SUCCESS || flag;
      }))
    return rc;
  PMPI_Cancel(&request);
  PMPI_Request_free(&request);
  return raise(MPI_COMM_WORLD, "halox_mpi: rank " + std::to_string(c.rank) + " waited " +
                                   std::to_string(static_cast<long long>(knobs().timeout)) +
                                   " s for the bytes of rank " + std::to_string(note.sender) +
                                   "'s 229-byte message, which follow its note at once: is rank " +
                                   std::to_string(note.sender) +
                                   " stalled or dead? (HALOX_MPI_TIMEOUT)");
}

// A chunked note's bytes (they follow the note at once), each chunk's receive posted now and
// unpacked as it lands while the next ones travel; what the receive cannot hold is received
// and dropped (the caller reports the truncation). A chunk not there within
// HALOX_MPI_TIMEOUT of the one before names both ranks.
int receive_chunks(const Pending& r, const Note& note, Channel& c) {
  Staging bytes(static_cast<std::size_t>(note.bytes));
  std::vector<MPI_Request> receives;
  for (std::int64_t lo = 0; lo < note.bytes; lo += note.chunk) {
    const int n = static_cast<int>(std::min(note.chunk, note.bytes - lo));
    const int rc = PMPI_Irecv(bytes.data() + lo, n, MPI_BYTE, note.sender, data_tag(note.seq),
                              c.side, &receives.emplace_back(MPI_REQUEST_NULL));
    if (rc != MPI_SUCCESS) return rc;
  }
  std::size_t waited = 0;  // chunks known to be in
  auto arrive = [&](std::size_t k) {
    for (; waited <= k; ++waited) {
      MPI_Request& q = receives[waited];
      int rc = MPI_SUCCESS;
      if (!poll_bounded([&] {
            int flag = 0;
            rc = PMPI_Test(&q, &flag, MPI_STATUS_IGNORE);
            return rc != MPI_SUCCESS || flag;
          }))
        throw Error("rank " + std::to_string(c.rank) + " waited " +
                    std::to_string(static_cast<long long>(knobs().timeout)) + " s for chunk " +
                    std::to_string(waited + 1) + " of " + std::to_string(receives.size()) +
                    " of rank " + std::to_string(note.sender) + "'s " + std::to_string(note.bytes) +
                    "-byte message: is rank " + std::to_string(note.sender) +
                    " stalled or dead? (HALOX_MPI_TIMEOUT)");
      if (rc != MPI_SUCCESS)
        throw Error("a chunk's receive failed (MPI error " + std::to_string(rc) + ")");
    }
  };
  try {
    const std::int64_t holds = r.count * r.type->size();
    unpack_from_host_in_chunks(
        bytes.data(), std::min(note.bytes, holds), r.buffer, r.count, *r.type, r.memory, note.chunk,
        [&](std::int64_t lo, std::int64_t) { arrive(static_cast<std::size_t>(lo / note.chunk)); });
    if (!receives.empty()) arrive(receives.size() - 1);  // those past what the receive holds
    tally(Path::chunked_receive, note.bytes);
  } catch (const std::exception& e) {
    for (MPI_Request& q : receives) {
      if (q == MPI_REQUEST_NULL) continue;
      PMPI_Cancel(&q);
      PMPI_Request_free(&q);
    }
    return raise(r.comm, std::string("halox_mpi: ") + e.what());
  }
  return MPI_SUCCESS;
}

struct HeldAcks {  // the open ServeBatch of this thread: acknowledgements (peer, seq) held
  bool open = false;
  std::vector<std::pair<int, std::uint64_t>> acks;
};
thread_local HeldAcks held;

int send_ack(int peer, std::uint64_t seq) {
  return PMPI_Send(nullptr, 0, MPI_BYTE, peer, ack_tag(seq), channel().side);
}

// The queued copies waited for, then the held acknowledgements sent (always: the senders'
// requests complete on them).
int flush_held() {
  if (held.acks.empty()) return MPI_SUCCESS;
  int rc = MPI_SUCCESS;
  try {
    wait_for_unpacks();
  } catch (const std::exception& e) {
    std::string peers;
    for (const auto& [peer, seq] : held.acks) {
      const std::string name = std::to_string(peer);
      if (peers.find(" " + name + ",") == std::string::npos) peers += " " + name + ",";
    }
    peers.pop_back();
    rc = raise(MPI_COMM_WORLD, "halox_mpi: rank " + std::to_string(channel().rank) +
                                   " reading the messages of rank(s)" + peers +
                                   " from their memory: " + e.what());
  }
  for (const auto& [peer, seq] : held.acks) {
    const int acked = send_ack(peer, seq);
    if (rc == MPI_SUCCESS) rc = acked;
  }
  held.acks.clear();
  return rc;
}

}  // namespace

ServeBatch::ServeBatch() : m_outermost(!held.open) {
  held.open = true;
}

ServeBatch::~ServeBatch() {
  if (m_outermost && held.open) close();
}

int ServeBatch::close() {
  if (!m_outermost) return MPI_SUCCESS;
  const int rc = flush_held();
  held.open = false;
  return rc;
}

int serve(const Pending& r, const char* note_bytes, MPI_Status& status) {
  Channel& c = channel();
  Note note;
  std::memcpy(&note, note_bytes, sizeof(note));
  const std::int64_t holds = r.count * r.type->size();
  int rc = MPI_SUCCESS;
  std::int64_t arrived = kNoteBytes;
  if (note.kind == NoteKind::chunks) {
    arrived = note.bytes;
    rc = receive_chunks(r, note, c);
  } else if (note.kind == NoteKind::side) {
    Staging bytes(kNoteBytes);
    rc = receive_promised(bytes.data(), note, c);
    if (rc == MPI_SUCCESS) {
      try {
        unpack_from_host(bytes.data(), std::min<std::int64_t>(kNoteBytes, holds), r.buffer, r.count,
                         *r.type, r.memory);
      } catch (const std::exception& e) {
        rc = raise(r.comm, std::string("halox_mpi: a receive's copy failed: ") + e.what());
      }
    }
  } else {
    arrived = note.bytes;
    const std::int64_t n = std::min(note.bytes, holds);
    try {
      const auto kind = static_cast<Memory>(note.memory);
      unpack_from_peer(note.sender, note.where, kind, n, r.buffer, r.count, *r.type, r.memory,
                       !held.open, note.ready ? note.ready_event : nullptr);
      tally(Path::ipc_receive, n);
    } catch (const std::exception& e) {
      rc = raise(r.comm, std::string("halox_mpi: reading rank ") + std::to_string(note.sender) +
                             "'s message from its memory failed: " + e.what());
    }
    // Always: the sender's request completes on it (held until the batch's copies are done).
    if (held.open) {
      held.acks.emplace_back(note.sender, note.seq);
    } else {
      const int acked = send_ack(note.sender, note.seq);
      if (rc == MPI_SUCCESS) rc = acked;
    }
  }
  PMPI_Status_set_elements_x(&status, MPI_BYTE, std::min(arrived, holds));
  if (rc == MPI_SUCCESS && arrived > holds) {
    status.MPI_ERROR = MPI_ERR_TRUNCATE;
    PMPI_Comm_call_errhandler(r.comm, MPI_ERR_TRUNCATE);
    return MPI_ERR_TRUNCATE;
  }
  return rc;
}

int wait_serving(MPI_Request* request, MPI_Status* status) {
  if (*request == MPI_REQUEST_NULL) return MPI_SUCCESS;
  // Held acknowledgements go first, and after each serving pass: a peer may wait for them.
  if (const int flushed = flush_held(); flushed != MPI_SUCCESS) return flushed;
  const Waiting waiting;
  if (!receives_to_serve()) return PMPI_Wait(request, status);
  Serving serving;
  for (;;) {
    serving.meanwhile();
    if (const int flushed = flush_held(); flushed != MPI_SUCCESS) return flushed;
    int flag = 0, rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(progress_mutex());
      rc = PMPI_Test(request, &flag, status);
    }
    if (rc != MPI_SUCCESS || flag) return rc;
  }
}

// ---- Probes, and the messages they take off MPI's queue ----

namespace {

struct Taken {  // a message as it arrived: a note's kNoteBytes, or data
  MPI_Comm comm = MPI_COMM_NULL;
  int source = 0, tag = 0;
  MPI_Status status{};
  std::vector<char> bytes;
};

std::mutex& queue_mutex() {
  static std::mutex m;
  return m;
}
std::map<MPI_Comm, std::deque<Taken>>& queues() {
  static std::map<MPI_Comm, std::deque<Taken>> q;
  return q;
}
std::set<MPI_Message>& taken_messages() {  // MPI_Mprobe's handles for taken messages
  static std::set<MPI_Message> handles;
  return handles;
}
std::atomic<bool> any_queued{false};

bool matches(const Taken& t, int source, int tag) {
  return (source == MPI_ANY_SOURCE || source == t.source) && (tag == MPI_ANY_TAG || tag == t.tag);
}

// The status a probe reports: a note's real size.
MPI_Status reported(const Taken& t) {
  MPI_Status s = t.status;
  if (t.bytes.size() == kNoteBytes) {
    Note note;
    std::memcpy(&note, t.bytes.data(), sizeof(note));
    PMPI_Status_set_elements_x(&s, MPI_BYTE, note.bytes);
  }
  return s;
}

// The first queued message of `comm` matching (source, tag); removed with `take`.
bool find_queued(MPI_Comm comm, int source, int tag, bool take, Taken* out) {
  if (!any_queued.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(queue_mutex());
  auto q = queues().find(comm);
  if (q == queues().end()) return false;
  for (auto it = q->second.begin(); it != q->second.end(); ++it) {
    if (!matches(*it, source, tag)) continue;
    if (!take) {
      *out = *it;
      return true;
    }
    *out = std::move(*it);
    q->second.erase(it);
    if (q->second.empty()) queues().erase(q);
    any_queued = !queues().empty();
    return true;
  }
  return false;
}

Taken receive_message(MPI_Message* message, const MPI_Status& probed, MPI_Comm comm) {
  Taken t;
  t.comm = comm;
  int n = 0;
  PMPI_Get_count(&probed, MPI_BYTE, &n);
  t.source = probed.MPI_SOURCE;
  t.tag = probed.MPI_TAG;
  t.bytes.resize(static_cast<std::size_t>(n));
  PMPI_Mrecv(t.bytes.data(), n, MPI_BYTE, message, &t.status);
  return t;
}

// Takes the messages of `source` off MPI's queue, in order, up to the note of tag `tag` that
// a probe found: later receives from `source` must meet the earlier ones first.
void take_through_note(int source, int tag, MPI_Comm comm) {
  for (bool last = false; !last;) {
    MPI_Message message;
    MPI_Status probed;
    PMPI_Mprobe(source, MPI_ANY_TAG, comm, &message, &probed);
    Taken t = receive_message(&message, probed, comm);
    last = t.tag == tag && t.bytes.size() == kNoteBytes;
    std::lock_guard<std::mutex> lock(queue_mutex());
    queues()[comm].push_back(std::move(t));
    any_queued = true;
  }
}

MPI_Message hand_out(Taken t) {
  auto* kept = new Taken(std::move(t));
  const auto handle = reinterpret_cast<MPI_Message>(kept);
  std::lock_guard<std::mutex> lock(queue_mutex());
  taken_messages().insert(handle);
  return handle;
}

// A receive completed here: a generalized request whose status is `status`.
struct Done {
  MPI_Status status;
  int rc;
};
int query_done(void* state, MPI_Status* status) {
  const auto* d = static_cast<Done*>(state);
  MPI_Count bytes = 0;
  PMPI_Get_elements_x(&d->status, MPI_BYTE, &bytes);
  PMPI_Status_set_elements_x(status, MPI_BYTE, bytes);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = d->status.MPI_SOURCE;
  status->MPI_TAG = d->status.MPI_TAG;
  status->MPI_ERROR = d->rc;
  return d->rc;
}
int free_done(void* state) {
  delete static_cast<Done*>(state);
  return MPI_SUCCESS;
}
int cancel_done(void*, int) {
  return MPI_SUCCESS;
}

// A taken message delivered into a receive's buffer, as its receive would have.
int deliver(const Taken& t, void* buffer, int count, MPI_Datatype type, MPI_Comm comm,
            MPI_Status* status, MPI_Request* request) {
  Pending r;
  r.receive = true;
  r.buffer = buffer;
  r.count = count;
  r.comm = comm;
  r.memory = where(buffer, count, type);
  r.type = imported(type);
  MPI_Status s = t.status;
  int rc = MPI_SUCCESS;
  if (t.bytes.size() == kNoteBytes) {
    rc = serve(r, t.bytes.data(), s);
  } else {
    const std::int64_t holds = r.count * r.type->size();
    const auto arrived = static_cast<std::int64_t>(t.bytes.size());
    unpack_from_host(t.bytes.data(), std::min(arrived, holds), buffer, count, *r.type, r.memory);
    if (arrived > holds) {
      PMPI_Status_set_elements_x(&s, MPI_BYTE, holds);
      s.MPI_ERROR = MPI_ERR_TRUNCATE;
      PMPI_Comm_call_errhandler(comm, MPI_ERR_TRUNCATE);
      rc = MPI_ERR_TRUNCATE;
    }
  }
  if (request) {
    PMPI_Grequest_start(query_done, free_done, cancel_done, new Done{s, rc}, request);
    PMPI_Grequest_complete(*request);
    return MPI_SUCCESS;  // the error comes with its wait, as the library's would
  }
  if (status != MPI_STATUS_IGNORE) *status = s;
  return rc;
}

}  // namespace

int probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  MPI_Status mine;
  MPI_Status* s = status == MPI_STATUS_IGNORE ? &mine : status;
  Serving serving;
  for (;;) {
    Taken t;
    if (find_queued(comm, source, tag, message != nullptr, &t)) {
      *s = reported(t);
      if (message) *message = hand_out(std::move(t));
      if (flag) *flag = 1;
      return MPI_SUCCESS;
    }
    int got = 0, rc = MPI_SUCCESS;
    MPI_Message found = MPI_MESSAGE_NULL;
    if (!flag && !receives_to_serve()) {  // blocking, nothing to serve meanwhile
      rc = message ? PMPI_Mprobe(source, tag, comm, &found, s) : PMPI_Probe(source, tag, comm, s);
      got = 1;
    } else {
      serving.meanwhile();
      rc = message ? PMPI_Improbe(source, tag, comm, &got, &found, s)
                   : PMPI_Iprobe(source, tag, comm, &got, s);
    }
    if (rc != MPI_SUCCESS) return rc;
    if (got) {
      int bytes = 0;
      PMPI_Get_count(s, MPI_BYTE, &bytes);
      if (bytes != kNoteBytes || s->MPI_SOURCE == MPI_PROC_NULL) {
        if (message) *message = found;
        if (flag) *flag = 1;
        return MPI_SUCCESS;
      }
      if (message) {  // matched already: off MPI's queue, no order to keep
        Taken note = receive_message(&found, *s, comm);
        *s = reported(note);
        *message = hand_out(std::move(note));
        if (flag) *flag = 1;
        return MPI_SUCCESS;
      }
      take_through_note(s->MPI_SOURCE, s->MPI_TAG, comm);
      continue;  // found in the queue now
    }
    if (flag) {
      *flag = 0;
      return MPI_SUCCESS;
    }
  }
}

bool receive_queued(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                    MPI_Status* status, MPI_Request* request, int* rc) {
  if (!any_queued.load(std::memory_order_relaxed)) return false;  // no Taken made
  Taken t;
  if (!find_queued(comm, source, tag, true, &t)) return false;
  *rc = deliver(t, buffer, count, type, comm, status, request);
  return true;
}

bool receive_taken(void* buffer, int count, MPI_Datatype type, MPI_Message* message,
                   MPI_Status* status, MPI_Request* request, int* rc) {
  Taken* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(queue_mutex());
    auto it = taken_messages().find(*message);
    if (it == taken_messages().end()) return false;
    t = reinterpret_cast<Taken*>(*it);
    taken_messages().erase(it);
  }
  const std::unique_ptr<Taken> owned(t);
  *message = MPI_MESSAGE_NULL;
  *rc = deliver(*owned, buffer, count, type, owned->comm, status, request);
  return true;
}

}  // namespace halox::mpi
