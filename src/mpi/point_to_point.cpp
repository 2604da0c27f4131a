// The MPI interposer's point-to-point calls, waits and packs. A call on host memory goes to
// the MPI library as it is (PMPI_*). A call on device memory moves the message through host
// staging, in the MPI library's own order: the send is packed into staging (one GPU pack into
// pinned memory, or one copy when the layout is contiguous) and handed to the library as
// count x size bytes at the call; the receive is posted at the call into staging and
// unpacked into the device buffer when its wait or test completes it. Matching, ordering,
// statuses (counts in bytes, as the library keeps them), truncation and errors are therefore
// the MPI library's; only the bytes take a detour.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "calls.hpp"
#include "halox/config.hpp"
#include "../runtime/mpi_cuda_aware.hpp"
#include "memory.hpp"
#include "protocol.hpp"
#include "state.hpp"

namespace halox::mpi {

// A contiguous layout on device memory that a CUDA-aware MPI library moves itself.
bool library_moves(int count, MPI_Datatype type, MPI_Aint true_extent) {
#if HALOX_HAS_CUDA
  static const bool aware = detail::mpi_is_cuda_aware();
  if (!aware) return false;
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_size(type, &size);
  PMPI_Type_get_extent(type, &lb, &extent);
  return size == true_extent && (count == 1 || extent == size);
#else
  (void)count, (void)type, (void)true_extent;
  return false;
#endif
}

Memory where(const void* buffer, int count, MPI_Datatype type) {
  // Before any CUDA context (a host program): no query of the type or the driver.
  if (count <= 0 || buffer == MPI_IN_PLACE || !device_memory_possible()) return Memory::host;
  MPI_Aint lb = 0, extent = 0;
  if (PMPI_Type_get_true_extent(type, &lb, &extent) != MPI_SUCCESS || extent == 0)
    return Memory::host;
  const Memory memory = memory_of(address(buffer, lb));
  if (memory == Memory::device && library_moves(count, type, extent)) return Memory::host;
  return memory;
}

int staged_bytes(const char* call, MPI_Comm comm, int count, const Datatype& type, int* bytes) {
  const std::int64_t n = static_cast<std::int64_t>(count) * type.size();
  if (n > INT_MAX) {
    return raise(comm, std::string("halox_mpi: ") + call + ": " + std::to_string(n) +
                           " bytes of device memory in one message; halox stages at most " +
                           std::to_string(INT_MAX));
  }
  *bytes = static_cast<int>(n);
  return MPI_SUCCESS;
}

int failed(const char* call, MPI_Comm comm, const std::exception& e) {
  return raise(comm, std::string("halox_mpi: ") + call + " on device memory: " + e.what());
}

// The bytes of `count` instances of `type`.
std::int64_t message_bytes(int count, MPI_Datatype type) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return static_cast<std::int64_t>(count) * size;
}

// A send the protocol carries (any message of a note's size, a larger device message; see
// send_with_note for the rest), sent: true, with the call's result in `rc`.
bool sent_with_note(const SendMode& mode, const void* buffer, int count, MPI_Datatype type,
                    int dest, int tag, MPI_Comm comm, MPI_Request* request, bool persistent,
                    Memory memory, int* rc) {
  if (dest == MPI_PROC_NULL || !protocol_on()) return false;
  const std::int64_t bytes = message_bytes(count, type);
  if (bytes != kNoteBytes && (memory == Memory::host || bytes < kNoteBytes)) return false;
  return send_with_note(mode, buffer, count, type, dest, tag, comm, request, persistent, memory,
                        bytes, rc);
}

// A blocking call of the library, or, while receives here may get notes that a peer waits
// for, its nonblocking form and a wait that serves them.
int send_blocking(const SendMode& mode, const void* buffer, int count, MPI_Datatype type, int dest,
                  int tag, MPI_Comm comm) {
  if (!receives_to_serve()) return mode.blocking(buffer, count, type, dest, tag, comm);
  MPI_Request request;
  const int rc = mode.start(buffer, count, type, dest, tag, comm, &request);
  return rc != MPI_SUCCESS ? rc : wait_serving(&request, MPI_STATUS_IGNORE);
}

int send(const SendMode& mode, const void* buffer, int count, MPI_Datatype type, int dest, int tag,
         MPI_Comm comm, MPI_Request* request) {
  const Memory memory = dest == MPI_PROC_NULL ? Memory::host : where(buffer, count, type);
  try {
    int rc = MPI_SUCCESS;
    if (sent_with_note(mode, buffer, count, type, dest, tag, comm, request, false, memory, &rc))
      return rc;
    if (memory == Memory::host) {
      if (reporting()) count_host(count, type);
      return request ? mode.start(buffer, count, type, dest, tag, comm, request)
                     : send_blocking(mode, buffer, count, type, dest, tag, comm);
    }
    Pending p;
    p.type = imported(type);
    int bytes = 0;
    if ((rc = staged_bytes(mode.name, comm, count, *p.type, &bytes))) return rc;
    p.staging = Staging(static_cast<std::size_t>(bytes));
    pack_to_host(buffer, count, *p.type, p.staging.data(), memory);
    tally(Path::staged_send, bytes);
    if (!request) return send_blocking(mode, p.staging.data(), bytes, MPI_BYTE, dest, tag, comm);
    rc = mode.start(p.staging.data(), bytes, MPI_BYTE, dest, tag, comm, request);
    if (rc == MPI_SUCCESS) track(*request, std::move(p));
    return rc;
  } catch (const std::exception& e) {
    return failed(mode.name, comm, e);
  }
}

int send_init(const SendMode& mode, const void* buffer, int count, MPI_Datatype type, int dest,
              int tag, MPI_Comm comm, MPI_Request* request) {
  const Memory memory = dest == MPI_PROC_NULL ? Memory::host : where(buffer, count, type);
  try {
    int rc = MPI_SUCCESS;
    if (sent_with_note(mode, buffer, count, type, dest, tag, comm, request, true, memory, &rc))
      return rc;
    if (memory == Memory::host) return mode.init(buffer, count, type, dest, tag, comm, request);
    Pending p;
    p.persistent = true;
    p.type = imported(type);
    p.buffer = const_cast<void*>(buffer);
    p.count = count;
    p.memory = memory;
    int bytes = 0;
    if ((rc = staged_bytes(mode.name, comm, count, *p.type, &bytes))) return rc;
    p.staging = Staging(static_cast<std::size_t>(bytes));
    rc = mode.init(p.staging.data(), bytes, MPI_BYTE, dest, tag, comm, request);
    if (rc == MPI_SUCCESS) track(*request, std::move(p));  // packed at each MPI_Start
    return rc;
  } catch (const std::exception& e) {
    return failed(mode.name, comm, e);
  }
}

// A receive into device memory: staging posted now, unpacked at completion.
Pending receive_staging(void* buffer, int count, MPI_Datatype type, Memory memory, const char* call,
                        MPI_Comm comm, int* bytes, int* rc) {
  Pending p;
  p.receive = true;
  p.type = imported(type);
  p.buffer = buffer;
  p.count = count;
  p.memory = memory;
  *rc = staged_bytes(call, comm, count, *p.type, bytes);
  if (*rc == MPI_SUCCESS) p.staging = Staging(static_cast<std::size_t>(*bytes));
  return p;
}

int receive(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
            MPI_Status* status, MPI_Request* request, bool persistent) {
  const char* call = persistent ? "MPI_Recv_init" : request ? "MPI_Irecv" : "MPI_Recv";
  try {
    int rc = MPI_SUCCESS;
    if (!persistent && source != MPI_PROC_NULL &&
        receive_queued(buffer, count, type, source, tag, comm, status, request, &rc))
      return rc;
    const Memory memory = source == MPI_PROC_NULL ? Memory::host : where(buffer, count, type);
    const bool notes =
        protocol_on() && source != MPI_PROC_NULL && message_bytes(count, type) >= kNoteBytes;
    // A host receive that cannot hold a note goes to the library before any bookkeeping.
    std::shared_ptr<const Datatype> noted;
    if (memory == Memory::host) {
      if (notes) {
        try {
          noted = imported(type);
        } catch (const DatatypeError&) {
          // A type halox cannot import cannot be served a note (documented); passed through.
        }
      }
      if (!noted) {
        if (persistent) return PMPI_Recv_init(buffer, count, type, source, tag, comm, request);
        if (request) return PMPI_Irecv(buffer, count, type, source, tag, comm, request);
        if (!receives_to_serve()) return PMPI_Recv(buffer, count, type, source, tag, comm, status);
        MPI_Request mine;
        rc = PMPI_Irecv(buffer, count, type, source, tag, comm, &mine);
        return rc != MPI_SUCCESS ? rc : wait_serving(&mine, status);
      }
    }
    Pending p;
    int bytes = 0;
    if (memory == Memory::host) {
      p.type = std::move(noted);
      p.receive = true;
      p.buffer = buffer;
      p.count = count;
    } else {
      p = receive_staging(buffer, count, type, memory, call, comm, &bytes, &rc);
      if (rc != MPI_SUCCESS) return rc;
    }
    p.notes = notes;
    p.comm = comm;
    p.persistent = persistent;
    // The library receives into the user's host buffer or into staging, as bytes.
    void* into = memory == Memory::host ? buffer : p.staging.data();
    const int n = memory == Memory::host ? count : bytes;
    const MPI_Datatype as = memory == Memory::host ? type : MPI_BYTE;
    if (!request && !receives_to_serve()) {  // nothing to serve while it blocks
      MPI_Status mine;
      MPI_Status* s = status == MPI_STATUS_IGNORE ? &mine : status;
      {
        const Waiting waiting;
        rc = PMPI_Recv(into, n, as, source, tag, comm, s);
      }
      const int unpacked = unpack_received(p, *s);
      return rc != MPI_SUCCESS ? rc : unpacked;
    }
    MPI_Request mine;
    MPI_Request* r = request ? request : &mine;
    rc = persistent ? PMPI_Recv_init(into, n, as, source, tag, comm, r)
                    : PMPI_Irecv(into, n, as, source, tag, comm, r);
    if (rc != MPI_SUCCESS) return rc;
    track(*r, std::move(p));
    if (request) return MPI_SUCCESS;
    return wait_or_test(WaitKind::wait, 1, r, nullptr, nullptr, nullptr, nullptr, status);
  } catch (const std::exception& e) {
    return failed(call, comm, e);
  }
}

int matched_receive(void* buffer, int count, MPI_Datatype type, MPI_Message* message,
                    MPI_Status* status, MPI_Request* request) {
  const char* call = request ? "MPI_Imrecv" : "MPI_Mrecv";
  try {
    int rc = MPI_SUCCESS;
    if (receive_taken(buffer, count, type, message, status, request, &rc)) return rc;
  } catch (const std::exception& e) {
    return failed(call, MPI_COMM_WORLD, e);
  }
  const Memory memory = *message == MPI_MESSAGE_NO_PROC ? Memory::host : where(buffer, count, type);
  if (memory == Memory::host) {
    return request ? PMPI_Imrecv(buffer, count, type, message, request)
                   : PMPI_Mrecv(buffer, count, type, message, status);
  }
  try {
    int bytes = 0, rc = MPI_SUCCESS;
    Pending p = receive_staging(buffer, count, type, memory, call, MPI_COMM_WORLD, &bytes, &rc);
    if (rc != MPI_SUCCESS) return rc;
    if (request) {
      rc = PMPI_Imrecv(p.staging.data(), bytes, MPI_BYTE, message, request);
      if (rc == MPI_SUCCESS) track(*request, std::move(p));
      return rc;
    }
    MPI_Status mine;
    MPI_Status* s = status == MPI_STATUS_IGNORE ? &mine : status;
    rc = PMPI_Mrecv(p.staging.data(), bytes, MPI_BYTE, message, s);
    const int unpacked = unpack_received(p, *s);
    return rc != MPI_SUCCESS ? rc : unpacked;
  } catch (const std::exception& e) {
    return failed(call, MPI_COMM_WORLD, e);
  }
}

// The waits and tests: the MPI library's, then each completed request's unpack. `handles`
// are the requests as they were before the call (the library sets completed ones to
// MPI_REQUEST_NULL), `owes` what each owed then.
int finish(const std::vector<MPI_Request>& handles,
           const std::vector<std::shared_ptr<Pending>>& owes, const int* indices, int done,
           MPI_Status* statuses, int rc) {
  ServeBatch batch;  // the notes of several receives: their copies waited for once
  for (int k = 0; k < done; ++k) {
    const auto i = static_cast<std::size_t>(indices ? indices[k] : k);
    MPI_Status& status = statuses[indices ? k : static_cast<int>(i)];
    // MPI_ERR_IN_STATUS: a request marked pending has not completed; it stays tracked.
    if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR == MPI_ERR_PENDING) continue;
    const int unpacked = completed(handles[i], owes[i], status);
    if (rc == MPI_SUCCESS) rc = unpacked;
  }
  const int flushed = batch.close();
  return rc == MPI_SUCCESS ? flushed : rc;
}

// One call of the library's for `kind`.
int library_call(WaitKind kind, int n, MPI_Request* requests, int* flag, int* index, int* outcount,
                 int* indices, MPI_Status* s) {
  switch (kind) {
    case WaitKind::wait: return PMPI_Wait(requests, s);
    case WaitKind::test: return PMPI_Test(requests, flag, s);
    case WaitKind::waitall: return PMPI_Waitall(n, requests, s);
    case WaitKind::testall: return PMPI_Testall(n, requests, flag, s);
    case WaitKind::waitany: return PMPI_Waitany(n, requests, index, s);
    case WaitKind::testany: return PMPI_Testany(n, requests, index, flag, s);
    case WaitKind::waitsome: return PMPI_Waitsome(n, requests, outcount, indices, s);
    case WaitKind::testsome: return PMPI_Testsome(n, requests, outcount, indices, s);
  }
  return MPI_ERR_INTERN;
}

WaitKind as_test(WaitKind kind) {
  switch (kind) {
    case WaitKind::wait: return WaitKind::test;
    case WaitKind::waitall: return WaitKind::testall;
    case WaitKind::waitany: return WaitKind::testany;
    case WaitKind::waitsome: return WaitKind::testsome;
    default: return kind;
  }
}

// The library's test for `kind` under the progress lock, the requests it completed marked done
// (progress must not ask about their freed handles). Returns whether the call has an answer;
// `flag` is the test's.
bool test_once(WaitKind kind, int n, MPI_Request* requests, int* flag, int* index, int* outcount,
               int* indices, MPI_Status* s, const std::vector<std::shared_ptr<Pending>>& owes,
               int* rc) {
  std::lock_guard<std::mutex> lock(progress_mutex());
  *flag = 0;
  *rc = library_call(kind, n, requests, flag, index, outcount, indices, s);
  auto mark = [&](int i) {
    if (i >= 0 && i < n && owes[static_cast<std::size_t>(i)])
      owes[static_cast<std::size_t>(i)]->done = true;
  };
  switch (kind) {
    case WaitKind::test:
      if (*flag) mark(0);
      return *flag;
    case WaitKind::testall:
      if (*flag)
        for (int i = 0; i < n; ++i) mark(i);
      return *flag;
    case WaitKind::testany:
      if (*flag && *index != MPI_UNDEFINED) mark(*index);
      return *flag;  // also when every request is inactive (index MPI_UNDEFINED)
    default:         // testsome
      if (*outcount != MPI_UNDEFINED)
        for (int k = 0; k < *outcount; ++k) mark(indices[k]);
      return *outcount != 0;
  }
}

int wait_or_test(WaitKind kind, int n, MPI_Request* requests, int* flag, int* index, int* outcount,
                 int* indices, MPI_Status* statuses) {
  progress_detached(false);
  // MPI_Ineighbor_* requests are completed by halox: driven here before the library waits.
  for (int i = 0; i < n; ++i) {
    if (requests[i] != MPI_REQUEST_NULL && is_neighbor_request(requests[i]))
      drive_neighbor_request(requests[i], as_test(kind) != kind);
  }
  if (!tracking()) return library_call(kind, n, requests, flag, index, outcount, indices, statuses);
  if (acks_awaited()) progress_receives();
  const bool ignore = statuses == MPI_STATUSES_IGNORE || statuses == MPI_STATUS_IGNORE;
  const std::vector<MPI_Request> handles(requests, requests + n);
  const std::vector<std::shared_ptr<Pending>> owes = owed(handles);
  const bool one = kind == WaitKind::wait || kind == WaitKind::test || kind == WaitKind::waitany ||
                   kind == WaitKind::testany;
  std::vector<MPI_Status> mine(ignore ? static_cast<std::size_t>(one ? 1 : n) : 0);
  MPI_Status* s = ignore ? mine.data() : statuses;
  int rc = MPI_SUCCESS, got = 1;
  const WaitKind test = as_test(kind);
  if (test == kind) {
    test_once(kind, n, requests, &got, index, outcount, indices, s, owes, &rc);
    if (flag) *flag = got;
  } else if (!receives_to_serve()) {
    const Waiting waiting;
    rc = library_call(kind, n, requests, nullptr, index, outcount, indices, s);
  } else {
    const Waiting waiting;
    // A wait that serves notes meanwhile: a peer may be waiting for one of ours.
    Serving serving;
    while (!test_once(test, n, requests, &got, index, outcount, indices, s, owes, &rc) &&
           rc == MPI_SUCCESS)
      serving.meanwhile();
    got = 1;
  }
  switch (kind) {
    case WaitKind::wait:
    case WaitKind::test: return got ? finish(handles, owes, nullptr, 1, s, rc) : rc;
    case WaitKind::waitall:
    case WaitKind::testall: return got ? finish(handles, owes, nullptr, n, s, rc) : rc;
    case WaitKind::waitany:
    case WaitKind::testany:
      if (!got || *index == MPI_UNDEFINED) return rc;
      return finish(handles, owes, index, 1, s, rc);
    case WaitKind::waitsome:
    case WaitKind::testsome:
      if (*outcount == MPI_UNDEFINED) return rc;
      return finish(handles, owes, indices, *outcount, s, rc);
  }
  return MPI_ERR_INTERN;
}

}  // namespace halox::mpi

using namespace halox::mpi;

namespace {

const SendMode kStandard{"MPI_Send", PMPI_Send, PMPI_Isend, PMPI_Send_init};
const SendMode kSynchronous{"MPI_Ssend", PMPI_Ssend, PMPI_Issend, PMPI_Ssend_init};
const SendMode kBuffered{"MPI_Bsend", PMPI_Bsend, PMPI_Ibsend, PMPI_Bsend_init};
const SendMode kReady{"MPI_Rsend", PMPI_Rsend, PMPI_Irsend, PMPI_Rsend_init};

}  // namespace

const SendMode& halox::mpi::standard_mode() {
  return kStandard;
}

extern "C" {

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send(kStandard, buf, count, type, dest, tag, comm, nullptr);
}
int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send(kSynchronous, buf, count, type, dest, tag, comm, nullptr);
}
int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send(kBuffered, buf, count, type, dest, tag, comm, nullptr);
}
int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send(kReady, buf, count, type, dest, tag, comm, nullptr);
}
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  return send(kStandard, buf, count, type, dest, tag, comm, request);
}
int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return send(kSynchronous, buf, count, type, dest, tag, comm, request);
}
int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return send(kBuffered, buf, count, type, dest, tag, comm, request);
}
int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request* request) {
  return send(kReady, buf, count, type, dest, tag, comm, request);
}
int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return send_init(kStandard, buf, count, type, dest, tag, comm, request);
}
int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return send_init(kSynchronous, buf, count, type, dest, tag, comm, request);
}
int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return send_init(kBuffered, buf, count, type, dest, tag, comm, request);
}
int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
  return send_init(kReady, buf, count, type, dest, tag, comm, request);
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  return receive(buf, count, type, source, tag, comm, status, nullptr, false);
}
int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  return receive(buf, count, type, source, tag, comm, MPI_STATUS_IGNORE, request, false);
}
int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Request* request) {
  return receive(buf, count, type, source, tag, comm, MPI_STATUS_IGNORE, request, true);
}
int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  return matched_receive(buf, count, type, message, status, nullptr);
}
int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message,
               MPI_Request* request) {
  return matched_receive(buf, count, type, message, MPI_STATUS_IGNORE, request);
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status* status) {
  // Straight to the library unless a buffer is on the device or the protocol may be in it.
  const bool plain =
      !protocol_on() || (message_bytes(sendcount, sendtype) != kNoteBytes &&
                         message_bytes(recvcount, recvtype) < kNoteBytes && !receives_to_serve());
  if (plain && where(sendbuf, sendcount, sendtype) == Memory::host &&
      where(recvbuf, recvcount, recvtype) == Memory::host) {
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                         source, recvtag, comm, status);
  }
  MPI_Request requests[2];
  if (const int rc = receive(recvbuf, recvcount, recvtype, source, recvtag, comm, MPI_STATUS_IGNORE,
                             &requests[0], false))
    return rc;
  if (const int rc =
          send(kStandard, sendbuf, sendcount, sendtype, dest, sendtag, comm, &requests[1]))
    return rc;
  MPI_Status statuses[2];
  const int rc =
      wait_or_test(WaitKind::waitall, 2, requests, nullptr, nullptr, nullptr, nullptr, statuses);
  if (status != MPI_STATUS_IGNORE) *status = statuses[0];
  return rc;
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                         int recvtag, MPI_Comm comm, MPI_Status* status) {
  const Memory memory = where(buf, count, type);
  if (memory == Memory::host && !protocol_on()) {
    return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
  }
  // Both directions as packed bytes in host staging, through the calls above (which carry
  // the protocol's notes), the received bytes unpacked into the buffer.
  try {
    int bytes = 0, rc = MPI_SUCCESS;
    Pending in =
        receive_staging(buf, count, type, memory, "MPI_Sendrecv_replace", comm, &bytes, &rc);
    if (rc != MPI_SUCCESS) return rc;
    Staging out(static_cast<std::size_t>(bytes));
    pack_to_host(buf, count, *in.type, out.data(), memory);
    if (memory != Memory::host) tally(Path::staged_send, bytes);
    MPI_Request requests[2];
    rc = receive(in.staging.data(), bytes, MPI_BYTE, source, recvtag, comm, MPI_STATUS_IGNORE,
                 &requests[0], false);
    if (rc != MPI_SUCCESS) return rc;
    rc = send(kStandard, out.data(), dest == MPI_PROC_NULL ? 0 : bytes, MPI_BYTE, dest, sendtag,
              comm, &requests[1]);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Status statuses[2];
    rc = wait_or_test(WaitKind::waitall, 2, requests, nullptr, nullptr, nullptr, nullptr, statuses);
    int arrived = 0;
    PMPI_Get_count(&statuses[0], MPI_BYTE, &arrived);
    if (source != MPI_PROC_NULL && arrived > 0 && arrived != MPI_UNDEFINED) {
      unpack_from_host(in.staging.data(), std::min(arrived, bytes), buf, count, *in.type, memory);
      if (memory != Memory::host) tally(Path::staged_receive, arrived);
    }
    if (status != MPI_STATUS_IGNORE) *status = statuses[0];
    return rc;
  } catch (const std::exception& e) {
    return failed("MPI_Sendrecv_replace", comm, e);
  }
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (!protocol_on()) return PMPI_Probe(source, tag, comm, status);
  return probe(source, tag, comm, nullptr, nullptr, status);
}
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (!protocol_on()) return PMPI_Iprobe(source, tag, comm, flag, status);
  return probe(source, tag, comm, flag, nullptr, status);
}
int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
  if (!protocol_on()) return PMPI_Mprobe(source, tag, comm, message, status);
  return probe(source, tag, comm, nullptr, message, status);
}
int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message,
                MPI_Status* status) {
  if (!protocol_on()) return PMPI_Improbe(source, tag, comm, flag, message, status);
  return probe(source, tag, comm, flag, message, status);
}

int MPI_Start(MPI_Request* request) {
  try {
    if (tracking()) before_start(*request);
  } catch (const std::exception& e) {
    return failed("MPI_Start", MPI_COMM_WORLD, e);
  }
  return PMPI_Start(request);
}
int MPI_Startall(int count, MPI_Request requests[]) {
  try {
    if (tracking()) {
      for (int i = 0; i < count; ++i) before_start(requests[i]);
    }
  } catch (const std::exception& e) {
    return failed("MPI_Startall", MPI_COMM_WORLD, e);
  }
  return PMPI_Startall(count, requests);
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  return wait_or_test(WaitKind::wait, 1, request, nullptr, nullptr, nullptr, nullptr, status);
}
int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  return wait_or_test(WaitKind::test, 1, request, flag, nullptr, nullptr, nullptr, status);
}
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  return wait_or_test(WaitKind::waitall, count, requests, nullptr, nullptr, nullptr, nullptr,
                      statuses);
}
int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  return wait_or_test(WaitKind::testall, count, requests, flag, nullptr, nullptr, nullptr,
                      statuses);
}
int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  return wait_or_test(WaitKind::waitany, count, requests, nullptr, index, nullptr, nullptr, status);
}
int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  return wait_or_test(WaitKind::testany, count, requests, flag, index, nullptr, nullptr, status);
}
int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  return wait_or_test(WaitKind::waitsome, incount, requests, nullptr, nullptr, outcount, indices,
                      statuses);
}
int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  return wait_or_test(WaitKind::testsome, incount, requests, nullptr, nullptr, outcount, indices,
                      statuses);
}

int MPI_Request_free(MPI_Request* request) {
  if (!tracking() || *request == MPI_REQUEST_NULL) return PMPI_Request_free(request);
  const MPI_Request handle = *request;
  int persistent = 0;
  if (is_tracked(handle, &persistent)) {
    if (!persistent) {
      // Completed later (its bytes still go to the device buffer): at the next call here.
      detach(handle);
      *request = MPI_REQUEST_NULL;
      return MPI_SUCCESS;
    }
    forget(handle);
  }
  return PMPI_Request_free(request);
}

int MPI_Pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize,
             int* position, MPI_Comm comm) {
  const Memory in = where(inbuf, incount, type);
  const Memory out =
      outsize > *position ? memory_of(static_cast<char*>(outbuf) + *position) : Memory::host;
  if (in == Memory::host && out == Memory::host) {
    return PMPI_Pack(inbuf, incount, type, outbuf, outsize, position, comm);
  }
  try {
    const auto t = imported(type);
    int bytes = 0;
    if (const int rc = staged_bytes("MPI_Pack", comm, incount, *t, &bytes)) return rc;
    if (*position + static_cast<std::int64_t>(bytes) > outsize) {
      PMPI_Comm_call_errhandler(comm, MPI_ERR_TRUNCATE);
      return MPI_ERR_TRUNCATE;
    }
    Staging packed(static_cast<std::size_t>(bytes));
    if (in == Memory::host) {
      int at = 0;
      if (const int rc = PMPI_Pack(inbuf, incount, type, packed.data(), bytes, &at, comm))
        return rc;
    } else {
      pack_to_host(inbuf, incount, *t, packed.data(), in);
    }
    char* to = static_cast<char*>(outbuf) + *position;
    if (out == Memory::host) {
      std::memcpy(to, packed.data(), static_cast<std::size_t>(bytes));
    } else {
      copy_from_host(to, packed.data(), static_cast<std::size_t>(bytes), out);
    }
    *position += bytes;
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return failed("MPI_Pack", comm, e);
  }
}

int MPI_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
               MPI_Datatype type, MPI_Comm comm) {
  const Memory in =
      insize > *position ? memory_of(static_cast<const char*>(inbuf) + *position) : Memory::host;
  const Memory out = where(outbuf, outcount, type);
  if (in == Memory::host && out == Memory::host) {
    return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, type, comm);
  }
  try {
    const auto t = imported(type);
    int bytes = 0;
    if (const int rc = staged_bytes("MPI_Unpack", comm, outcount, *t, &bytes)) return rc;
    if (*position + static_cast<std::int64_t>(bytes) > insize) {
      PMPI_Comm_call_errhandler(comm, MPI_ERR_TRUNCATE);
      return MPI_ERR_TRUNCATE;
    }
    Staging packed(static_cast<std::size_t>(bytes));
    const char* from = static_cast<const char*>(inbuf) + *position;
    if (in == Memory::host) {
      std::memcpy(packed.data(), from, static_cast<std::size_t>(bytes));
    } else {
      copy_to_host(packed.data(), from, static_cast<std::size_t>(bytes), in);
    }
    if (out == Memory::host) {
      int at = 0;
      if (const int rc = PMPI_Unpack(packed.data(), bytes, &at, outbuf, outcount, type, comm))
        return rc;
    } else {
      unpack_from_host(packed.data(), bytes, outbuf, outcount, *t, out);
    }
    *position += bytes;
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return failed("MPI_Unpack", comm, e);
  }
}

// A malformed knob (HALOX_MPI_REPORT=maybe) is bad input: rank 0 says which, every rank
// ends with exit code 2, as halox's programs do.
static int after_init(int rc) {
  if (rc != MPI_SUCCESS) return rc;
  int level = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&level);
  set_thread_level(level);
  // Every rank reads the knobs; the protocol's check of HALOX_MPI_IPC is collective.
  std::string error = knobs().error;
  if (protocol_init() != 0 && error.empty())
    error = "HALOX_MPI_IPC differs between ranks; give every rank the same value (mpirun -x)";
  int bad = error.empty() ? 0 : 1, any = 0;
  PMPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!any) return rc;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::fprintf(stderr, "halox_mpi: %s\n",
                 error.empty() ? "a malformed HALOX_MPI_* variable or tuning file on another rank"
                               : error.c_str());
  }
  PMPI_Finalize();
  std::exit(2);
}

int MPI_Init(int* argc, char*** argv) {
  return after_init(PMPI_Init(argc, argv));
}
int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  return after_init(PMPI_Init_thread(argc, argv, required, provided));
}

int MPI_Finalize() {
  progress_detached(true);
  if (reporting()) print_report();
  protocol_finalize();
  return PMPI_Finalize();
}

}  // extern "C"
