// The MPI interposer's state: the halox import of each MPI datatype (cached on the type, dropped
// at MPI_Type_free), the requests whose completion still has work (a staged receive's copy to
// the device, a staged send's buffer to release), and the counters of the report.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "halox/datatype.hpp"
#include "memory.hpp"

namespace halox::mpi {

struct SendMode;

/// The halox import of `type` (committed), cached: for a derived type in an attribute whose
/// delete callback drops it at MPI_Type_free, for a named type for the process's life. A
/// request in flight holds its own reference, so freeing the type under it is safe.
std::shared_ptr<const Datatype> imported(MPI_Datatype type);

/// What a request still owes at its completion.
struct Pending {
  bool receive = false;     ///< a receive: unpack into `buffer` once the bytes are in
  bool persistent = false;  ///< MPI_Send_init / MPI_Recv_init: kept until MPI_Request_free
  Staging staging;          ///< the host bytes MPI moves
  void* buffer = nullptr;   ///< the user's device buffer
  std::int64_t count = 0;
  std::shared_ptr<const Datatype> type;
  Memory memory = Memory::host;
  MPI_Comm comm = MPI_COMM_NULL;
  // The protocol (protocol.hpp).
  bool notes = false;   ///< a receive that can hold a note: checked at completion
  bool served = false;  ///< its note served while a call waited: `served_status`
  bool done = false;    ///< completed by a test: no longer progressed
  MPI_Status served_status{};
  int served_rc = MPI_SUCCESS;
  /// A protocol send: the user holds the acknowledgement's receive (ipc) or the side bytes'
  /// send; the note is in flight beside it, from `note`.
  bool protocol_send = false;
  bool awaits_ack = false;  ///< an ipc note's send: complete when the peer has read the bytes
  MPI_Request note_request = MPI_REQUEST_NULL;
  std::vector<MPI_Request> chunk_sends;  ///< a chunked send's chunks but the last (the user's)
  std::vector<char> note;
  PeerStaging peer;  ///< ipc: the packed bytes of a non-contiguous layout
  ReadyEvent ready;  ///< recorded after the pack into `peer` (its note carries the handle)
  const SendMode* mode = nullptr;  ///< a persistent protocol send's note, at each MPI_Start
  int dest = 0, tag = 0;
};

/// A staged receive's bytes into its device buffer: what arrived (`status`), up to what the
/// receive holds (a truncated message fills the buffer, as MPI does).
/// A receive that can hold a note and got one is served instead (protocol.hpp); `status` is
/// then the real message's.
int unpack_received(const Pending& pending, MPI_Status& status);

/// Tracks `request` (a request of the MPI library) with what its completion owes.
void track(MPI_Request request, Pending pending);
/// Whether any request is tracked (the wait and test calls' fast path).
bool tracking();
/// Whether `request` is tracked, and whether it is persistent.
bool is_tracked(MPI_Request request, int* persistent);
/// A persistent send about to start: its buffer packed into its staging again.
void before_start(MPI_Request request);
/// What `request` owes (null when it is not tracked), taken before the MPI library's wait or
/// test: the library reuses a completed request's handle, maybe for another thread's.
std::shared_ptr<Pending> owed(MPI_Request request);
/// owed() of each of `requests`, under one lock.
std::vector<std::shared_ptr<Pending>> owed(const std::vector<MPI_Request>& handles);
/// `request` (its handle before the wait or test), owing `pending`, completed with `status`:
/// a receive's bytes unpacked, a non-persistent request dropped. Returns an MPI error code
/// (MPI_SUCCESS, or the halox error naming what failed).
int completed(MPI_Request request, const std::shared_ptr<Pending>& pending, MPI_Status& status);
/// MPI_Request_free of a persistent request: no longer tracked.
void forget(MPI_Request request);
/// MPI_Request_free of a tracked request still in flight: completed later, at the next
/// interposed call or at MPI_Finalize.
void detach(MPI_Request request);
/// Serves the notes of tracked receives that have completed, without completing them
/// (MPI_Request_get_status): a peer's send waits for that while this process waits for
/// something else (Irecv; Send; Wait on both sides is legal MPI).
void progress_receives();
/// Whether this process has ipc sends waiting for their acknowledgements: a peer may then be
/// waiting for this process to serve a note at the same time (both sides' Isend; Waitall).
bool acks_awaited();
/// A blocking ipc send's wait for its acknowledgement (its request is not tracked): counted
/// as awaited while it lasts.
struct AwaitingAck {
  AwaitingAck();
  ~AwaitingAck();
  AwaitingAck(const AwaitingAck&) = delete;
  AwaitingAck& operator=(const AwaitingAck&) = delete;
};
/// Serves notes while a blocking call tests its requests: at every test while this process
/// awaits acknowledgements, else every 20 us (a peer's ipc send may wait for one of this
/// process's receives; a program whose peers send no ipc notes pays almost nothing).
class Serving {
 public:
  void meanwhile();

 private:
  std::int64_t m_last = 0;
};
/// Whether some tracked receive could get a note: the blocking calls then wait by testing
/// and serving.
bool receives_to_serve();
/// Held by progress_receives and around the library's tests of a serving wait, so that
/// progress never asks about a request the test has just freed.
std::mutex& progress_mutex();
/// Tests the detached requests, finishing those done; with `all`, waits for them.
void progress_detached(bool all);

/// The report's counters (HALOX_MPI_REPORT=1).
enum class Path {
  host,
  staged_send,
  staged_receive,
  staged_collective,
  ipc_send,
  ipc_receive,
  ipc_mapped,    ///< a peer's allocation mapped here (messages: mappings; bytes: their lengths)
  ipc_remapped,  ///< opened again after "already mapped": a block shared
  neighbor_exchange,  ///< a neighbourhood collective as one halox exchange (bytes: sent)
  chunked_send,       ///< a large device message to a peer without IPC, in chunks
  chunked_receive,
};
void tally(Path path, std::int64_t bytes);
bool reporting();
/// Times the blocking call it lives in, when reporting: the report's time waited (nested
/// waits count once).
class Waiting {
 public:
  Waiting();
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  std::int64_t m_start = -1;
};
/// A message on host memory, passed to the MPI library (counted when reporting).
void count_host(int count, MPI_Datatype type);
void print_report();

/// An MPI error code whose string is `text` ("halox_mpi: MPI_Ibcast on device memory is not
/// covered ..."), made once per text; raised through `comm`'s error handler.
int raise(MPI_Comm comm, const std::string& text);

}  // namespace halox::mpi
