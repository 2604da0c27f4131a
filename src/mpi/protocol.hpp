// The interposer's in-band protocol (docs/mpi-interposer.md): a device message that a peer on
// this node reads itself (CUDA IPC) travels as a note of exactly kNoteBytes bytes on the
// user's source, tag and communicator, so that MPI matches it as it would match the data.
// Every message of exactly kNoteBytes is a note (one whose bytes were that size sends them on
// the side channel), so a receive tells a note from data by its size alone. The side
// channel is a duplicate of MPI_COMM_WORLD made in MPI_Init, peers by world rank.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "calls.hpp"
#include "memory.hpp"
#include "state.hpp"

namespace halox::mpi {

/// The size of a note: odd, so that real data rarely has it (such messages cost one more).
constexpr int kNoteBytes = 229;

/// side: a message of kNoteBytes, its bytes on the side channel; ipc: the peer reads the
/// bytes itself; chunks: a large device message to a peer that cannot map it (another node,
/// or HALOX_MPI_IPC=0), its bytes after the note on the side channel in chunks, copied to the
/// host and back chunk by chunk while the others travel (the seed's pipeline).
enum class NoteKind : std::int32_t { side = 1, ipc = 2, chunks = 3 };

/// The chunked pipeline: from which size a device message is chunked (the tuning file's
/// "pipelined_from_bytes", else kChunkedFrom), and its chunk size (the tuning file's
/// "chunk_bytes", else a quarter of the message from 512 KiB to 1 MiB; at most kMostChunks).
/// The defaults from a sweep on an H100 (docs/mpi-interposer.md): each chunk cost about 6 us
/// more, so smaller messages gained nothing from chunks and larger ones lost with 64 KiB.
constexpr std::int64_t kChunkedFrom = 1 << 20;
constexpr std::int64_t kMostChunks = 1024;
std::int64_t chunked_from();
std::int64_t chunk_bytes(std::int64_t message_bytes);

struct Note {
  NoteKind kind = NoteKind::side;
  std::int32_t sender = 0;  ///< world rank
  std::int32_t memory = 0;  ///< ipc: the Memory the bytes lie in
  std::int32_t ready = 0;   ///< ipc: 1 when the bytes are ready only after `ready_event`
  std::int64_t bytes = 0;   ///< the message's size
  std::uint64_t seq = 0;    ///< names the side channel's messages of this note
  std::int64_t chunk = 0;   ///< chunks: the bytes of each (the last may be shorter)
  Exported where;           ///< ipc: the packed bytes
  unsigned char ready_event[ReadyEvent::kHandleBytes] = {};  ///< a ReadyEvent's handle
};
static_assert(sizeof(Note) <= kNoteBytes);

/// MPI_Init's part (collective): the side channel, which ranks share this node, the knob
/// checked to agree on every rank. MPI_Finalize's part frees them.
int protocol_init();
void protocol_finalize();
/// Whether notes are in use (after MPI_Init; HALOX_MPI_IPC=0 turns only IPC off).
bool protocol_on();
/// Whether every rank of `comm` shares this rank's node and maps its device memory (IPC on):
/// the same answer on every rank of `comm`, from what MPI_Init learnt of the nodes.
bool all_near(MPI_Comm comm);

/// A send that the protocol carries: any message of kNoteBytes, a device message larger than
/// that to a peer that maps device memory, or one of chunked_from() bytes or more to a peer that
/// does not (not a buffered send, which must complete locally).
/// Returns false when it sends nothing (the caller stages the message as before).
bool send_with_note(const SendMode& mode, const void* buffer, int count, MPI_Datatype type,
                    int dest, int tag, MPI_Comm comm, MPI_Request* request, bool persistent,
                    Memory memory, std::int64_t bytes, int* rc);
/// A persistent protocol send's MPI_Start: the note sent again with the buffer's bytes now.
void restart_note(Pending& pending);

/// A receive that got a note (`note_bytes`, kNoteBytes of them): the real message delivered into
/// the receive's buffer, `status` made the real message's. Returns an MPI error code.
int serve(const Pending& receive, const char* note_bytes, MPI_Status& status);

/// While one is open on a thread, serve() leaves the device-to-device copies of the notes it
/// serves queued and holds their acknowledgements; flush() waits once for all the copies,
/// then sends the acknowledgements (osu_bw's window of 64 notes: one wait, not 64). Opened
/// where a wait finishes several receives; an inner one joins the outer; wait_serving flushes
/// first (a peer may wait for an acknowledgement held here). Returns an MPI error code.
class ServeBatch {
 public:
  ServeBatch();
  ~ServeBatch();  ///< flushes what close() did not
  ServeBatch(const ServeBatch&) = delete;
  ServeBatch& operator=(const ServeBatch&) = delete;
  int close();

 private:
  bool m_outermost;
};

/// Waits for `request` of the library, serving notes meanwhile (a peer may be waiting for one).
int wait_serving(MPI_Request* request, MPI_Status* status);

/// The probes and receives that meet a note by probing: MPI_Probe, MPI_Iprobe, MPI_Mprobe,
/// MPI_Improbe report a note's real size; messages taken off MPI's queue to read a note wait
/// in a per-communicator queue that later receives and probes consult first.
int probe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status);
/// A receive that first looks in that queue; false when it holds nothing matching.
bool receive_queued(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                    MPI_Status* status, MPI_Request* request, int* rc);
/// MPI_Mrecv / MPI_Imrecv of a message that MPI_Mprobe took off MPI's queue; false for a
/// message of the library's.
bool receive_taken(void* buffer, int count, MPI_Datatype type, MPI_Message* message,
                   MPI_Status* status, MPI_Request* request, int* rc);

}  // namespace halox::mpi
