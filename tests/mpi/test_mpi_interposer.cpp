// libhalox_mpi on real ranks without a GPU: HALOX_MPI_PRETEND_DEVICE=1 gives "device" memory
// that the program and the MPI library cannot touch (pages without access; the interposer
// reaches them only through its copies, as it reaches device memory), so a call that handed
// such a buffer to the MPI library would fault. Every scenario runs twice, once on plain host
// buffers (the MPI library's own result: the reference) and once on pretend device buffers,
// and the received bytes, statuses and error classes must be the same. Random datatypes from
// the generator go through MPI_Send of device buffers and are compared with MPI_Pack.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../common/interposer_buffer.hpp"
#include "../common/mpi_recipe.hpp"
#include "../common/random_datatype.hpp"
#include "../common/seed.hpp"
#include "../../src/mpi/protocol.hpp"

namespace {

int rank_of(MPI_Comm comm = MPI_COMM_WORLD) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int size_of(MPI_Comm comm = MPI_COMM_WORLD) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

void free_type(MPI_Datatype& t) {
  int integers, addresses, types, combiner;
  MPI_Type_get_envelope(t, &integers, &addresses, &types, &combiner);
  if (combiner != MPI_COMBINER_NAMED) MPI_Type_free(&t);
}

std::vector<char> pattern(std::size_t n, int salt) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + salt * 17 + 7) & 0xff);
  return v;
}
std::vector<char> poison(std::size_t n) {
  return std::vector<char>(n, static_cast<char>(0xA5));
}

struct Seen {  // what a scenario observed, compared between the host and the device run
  std::vector<std::vector<char>> bytes;
  std::vector<int> numbers;
  bool operator==(const Seen&) const = default;
};

void record(Seen& seen, const MPI_Status& s, MPI_Datatype type) {
  int count = 0, elements = 0;
  MPI_Get_count(&s, type, &count);
  MPI_Get_elements(&s, type, &elements);
  seen.numbers.insert(seen.numbers.end(), {s.MPI_SOURCE, s.MPI_TAG, count, elements});
}

template <class Scenario>
void same_on_host_and_device(const char* what, Scenario&& scenario) {
  Seen host, device;
  scenario(false, host);
  MPI_Barrier(MPI_COMM_WORLD);
  scenario(true, device);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(host.numbers, device.numbers) << what << " (rank " << rank_of() << ")";
  ASSERT_EQ(host.bytes.size(), device.bytes.size()) << what;
  for (std::size_t i = 0; i < host.bytes.size(); ++i)
    EXPECT_TRUE(host.bytes[i] == device.bytes[i])
        << what << ": buffer " << i << " differs (rank " << rank_of() << ")" <<
        [&] {
          std::string d;
          for (std::size_t k = 0; k < host.bytes[i].size() && d.size() < 600; ++k)
            if (host.bytes[i][k] != device.bytes[i][k])
              d += " [" + std::to_string(k) + "] " + std::to_string(int(host.bytes[i][k]) & 255) +
                   "/" + std::to_string(int(device.bytes[i][k]) & 255);
          return d;
        }();
  if (rank_of() == std::min(1, size_of() - 1))  // the rank that observes in every scenario
    EXPECT_FALSE(host.bytes.empty() && host.numbers.empty()) << what << ": nothing observed";
}

TEST(Interposer, IsInFrontOfTheMpiLibrary) {
  EXPECT_EQ(halox_mpi_active(), 1);
  Buffer b(64, true);
  ASSERT_NE(b.data(), nullptr) << "run with HALOX_MPI_PRETEND_DEVICE=1";
#if HALOX_TEST_DEVICE_MEMORY
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int device = -1;
  cudaGetDevice(&device);
  std::printf("interposer on rank %d: real device memory on GPU %d\n", rank, device);
#endif
}

// The order of messages of one source, tag and communicator holds with host and device
// buffers mixed on both sides, with any-source and any-tag receives among them.
TEST(Interposer, OrderStatusesAndWildcardsMixed) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("mixed order", [](bool device, Seen& seen) {
    constexpr int kMessages = 8, kInts = 300;
    const int rank = rank_of();
    if (rank == 0) {
      std::vector<std::unique_ptr<Buffer>> out;
      std::vector<MPI_Request> requests;
      for (int m = 0; m < kMessages; ++m) {
        out.push_back(std::make_unique<Buffer>(kInts * 4, device && m % 2 == 0));
        out.back()->write(pattern(kInts * 4, m));
        requests.emplace_back();
        MPI_Isend(out.back()->data(), kInts - m, MPI_INT, 1, 5 + m % 2, MPI_COMM_WORLD,
                  &requests.back());
      }
      MPI_Waitall(kMessages, requests.data(), MPI_STATUSES_IGNORE);
    } else if (rank == 1) {
      std::vector<std::unique_ptr<Buffer>> in;
      std::vector<MPI_Request> requests(kMessages);
      std::vector<MPI_Status> statuses(kMessages);
      for (int m = 0; m < kMessages; ++m) {
        in.push_back(std::make_unique<Buffer>(kInts * 4, device && m % 3 != 1));
        in.back()->write(poison(kInts * 4));
        const int source = m % 4 == 3 ? MPI_ANY_SOURCE : 0;
        const int tag = m % 4 == 2 ? MPI_ANY_TAG : 5 + m % 2;
        MPI_Irecv(in.back()->data(), kInts, MPI_INT, source, tag, MPI_COMM_WORLD, &requests[m]);
      }
      // Completed in an order of MPI's choosing: Waitany, Testsome, then Waitall.
      int index = 0;
      MPI_Waitany(kMessages, requests.data(), &index, &statuses[0]);
      seen.numbers.push_back(index >= 0);
      int done = 0;
      while (!done) MPI_Testall(kMessages, requests.data(), &done, statuses.data());
      for (int m = 0; m < kMessages; ++m) seen.bytes.push_back(in[m]->read());
      for (int m = 1; m < kMessages; ++m) record(seen, statuses[m], MPI_INT);
    }
  });
}

TEST(Interposer, TruncationZeroCountsAndProcNull) {
  if (size_of() < 2) GTEST_SKIP();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  same_on_host_and_device("truncation", [&](bool device, Seen& seen) {
    const int rank = rank_of(comm);
    Buffer b(400, device);
    b.write(pattern(400, 3));
    if (rank == 0) {
      MPI_Send(b.data(), 100, MPI_INT, 1, 1, comm);
      MPI_Send(b.data(), 0, MPI_INT, 1, 2, comm);
    } else if (rank == 1) {
      b.write(poison(400));
      MPI_Status s;
      const int rc = MPI_Recv(b.data(), 60, MPI_INT, 0, 1, comm, &s);
      int error_class = 0;
      MPI_Error_class(rc, &error_class);
      seen.numbers.push_back(error_class);
      seen.bytes.push_back(b.read());
      MPI_Recv(b.data(), 0, MPI_INT, 0, 2, comm, &s);
      record(seen, s, MPI_INT);
    }
    MPI_Status s;
    MPI_Sendrecv(b.data(), 10, MPI_INT, MPI_PROC_NULL, 0, b.data() + 40, 10, MPI_INT, MPI_PROC_NULL,
                 0, comm, &s);
    record(seen, s, MPI_INT);
  });
  MPI_Comm_free(&comm);
}

// Large device messages: through IPC on this node, in chunks where IPC is off (the ctest run
// with HALOX_MPI_IPC=0, as across nodes). Random sizes of several chunks, contiguous and
// strided (a vector whose blocks straddle chunk edges), blocking and nonblocking, device to
// device and device to host, wildcard receives, a receive that holds only part of one
// (MPI_ERR_TRUNCATE with the first bytes delivered), and a persistent send started twice.
TEST(Interposer, LargeMessagesAsMpiDoes) {
  if (size_of() < 2) GTEST_SKIP();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::uint64_t seed = halox::testing::test_seed("Interposer.LargeMessagesAsMpiDoes");
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  std::mt19937_64 rng(seed);
  // 1.8 to 4.2 MB: the strided sends (60% of it) too are chunked where IPC is off (from 1 MiB).
  const int ints = 450000 + static_cast<int>(rng() % 600000);
  MPI_Datatype strided;  // blocks of 3 ints every 5: 60% of the span
  MPI_Type_vector(ints / 5, 3, 5, MPI_INT, &strided);
  MPI_Type_commit(&strided);
  const std::size_t span = static_cast<std::size_t>(ints) * 4;
  same_on_host_and_device("large messages", [&](bool device, Seen& seen) {
    const int rank = rank_of(comm);
    Buffer a(span, device), b(span, device);
    Buffer host_side(span, false);
    if (rank == 0) {
      a.write(pattern(span, 5));
      b.write(pattern(span, 6));
      MPI_Send(a.data(), ints, MPI_INT, 1, 1, comm);
      MPI_Request r[2];
      MPI_Isend(b.data(), 1, strided, 1, 2, comm, &r[0]);
      MPI_Isend(a.data(), ints, MPI_INT, 1, 3, comm, &r[1]);
      MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
      MPI_Send(b.data(), ints, MPI_INT, 1, 4, comm);
      MPI_Send(a.data(), ints, MPI_INT, 1, 5, comm);
      MPI_Request persistent;  // started twice, the buffer rewritten in between
      MPI_Send_init(b.data(), 1, strided, 1, 6, comm, &persistent);
      for (int round = 0; round < 2; ++round) {
        b.write(pattern(span, 7 + round));
        MPI_Start(&persistent);
        MPI_Wait(&persistent, MPI_STATUS_IGNORE);
      }
      MPI_Request_free(&persistent);
    } else if (rank == 1) {
      a.write(poison(span));
      b.write(poison(span));
      host_side.write(poison(span));
      MPI_Status s;
      MPI_Recv(a.data(), ints, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &s);
      record(seen, s, MPI_INT);
      MPI_Request r[2];
      MPI_Status st[2];
      MPI_Irecv(b.data(), 1, strided, 0, 2, comm, &r[0]);
      MPI_Irecv(host_side.data(), ints, MPI_INT, 0, 3, comm, &r[1]);
      MPI_Waitall(2, r, st);
      record(seen, st[0], strided);
      record(seen, st[1], MPI_INT);
      seen.bytes.push_back(a.read());
      seen.bytes.push_back(b.read());
      seen.bytes.push_back(host_side.read());
      b.write(poison(span));
      const int rc = MPI_Recv(b.data(), ints / 3, MPI_INT, 0, 4, comm, &s);  // holds a third
      int error_class = 0;
      MPI_Error_class(rc, &error_class);
      seen.numbers.push_back(error_class);
      std::vector<char> held = b.read();  // past the receive's count MPI leaves it undefined
      held.resize(static_cast<std::size_t>(ints / 3) * 4);  // (Open MPI's copies fill it all)
      seen.bytes.push_back(held);
      MPI_Recv(a.data(), ints, MPI_INT, 0, 5, comm, &s);  // the pair still in step
      record(seen, s, MPI_INT);
      seen.bytes.push_back(a.read());
      for (int round = 0; round < 2; ++round) {
        b.write(poison(span));
        MPI_Recv(b.data(), 1, strided, 0, 6, comm, &s);
        record(seen, s, strided);
        seen.bytes.push_back(b.read());
      }
    }
  });
  MPI_Type_free(&strided);
  MPI_Comm_free(&comm);
}

// Persistent requests restarted on new data; a receive whose request was freed while in
// flight still lands; a datatype freed under a pending receive.
TEST(Interposer, PersistentFreedRequestsAndFreedTypes) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("persistent", [](bool device, Seen& seen) {
    const int rank = rank_of();
    MPI_Datatype column;
    MPI_Type_vector(20, 2, 5, MPI_INT, &column);
    MPI_Type_commit(&column);
    Buffer b(4 * 5 * 20, device);
    MPI_Request r;
    if (rank == 0) {
      MPI_Send_init(b.data(), 1, column, 1, 9, MPI_COMM_WORLD, &r);
      for (int round = 0; round < 3; ++round) {
        b.write(pattern(400, round));
        MPI_Start(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
      MPI_Request_free(&r);
      b.write(pattern(400, 11));
      MPI_Send(b.data(), 1, column, 1, 10, MPI_COMM_WORLD);  // to the freed receive
      MPI_Send(b.data(), 1, column, 1, 10, MPI_COMM_WORLD);  // after it, the same tag
      MPI_Send(b.data(), 1, column, 1, 12, MPI_COMM_WORLD);  // to the freed type
    } else if (rank == 1) {
      MPI_Recv_init(b.data(), 1, column, 0, 9, MPI_COMM_WORLD, &r);
      for (int round = 0; round < 3; ++round) {
        b.write(poison(400));
        MPI_Start(&r);
        MPI_Status s;
        MPI_Wait(&r, &s);
        record(seen, s, column);
        seen.bytes.push_back(b.read());
      }
      MPI_Request_free(&r);
      Buffer freed(400, device), later(400, device), typed(400, device);
      for (Buffer* x : {&freed, &later, &typed}) x->write(poison(400));
      MPI_Irecv(freed.data(), 1, column, 0, 10, MPI_COMM_WORLD, &r);
      MPI_Request_free(&r);
      MPI_Recv(later.data(), 1, column, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Datatype copy;
      MPI_Type_dup(column, &copy);
      MPI_Irecv(typed.data(), 1, copy, 0, 12, MPI_COMM_WORLD, &r);
      MPI_Type_free(&copy);
      MPI_Wait(&r, MPI_STATUS_IGNORE);  // the freed receive completed before this one
      for (Buffer* x : {&freed, &later, &typed}) seen.bytes.push_back(x->read());
    }
    MPI_Type_free(&column);
  });
}

// Probes, matched probes and Sendrecv_replace on device buffers of a derived type.
TEST(Interposer, ProbesMatchedReceivesAndReplace) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("probes", [](bool device, Seen& seen) {
    const int rank = rank_of();
    MPI_Datatype pairs;  // a struct of an int and a double, 3 of them per element
    const int lengths[2] = {1, 1};
    const MPI_Aint displs[2] = {0, 8};
    const MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, lengths, displs, types, &pairs);
    MPI_Type_commit(&pairs);
    Buffer b(16 * 7, device);
    b.write(pattern(16 * 7, rank + 1));
    if (rank == 0) {
      MPI_Send(b.data(), 7, pairs, 1, 3, MPI_COMM_WORLD);
      MPI_Send(b.data(), 5, pairs, 1, 4, MPI_COMM_WORLD);
    } else if (rank == 1) {
      b.write(poison(16 * 7));
      MPI_Status s;
      MPI_Probe(0, 3, MPI_COMM_WORLD, &s);
      record(seen, s, pairs);
      MPI_Recv(b.data(), 7, pairs, 0, 3, MPI_COMM_WORLD, &s);
      seen.bytes.push_back(b.read());
      MPI_Message message;
      MPI_Mprobe(MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &message, &s);
      record(seen, s, pairs);
      b.write(poison(16 * 7));
      MPI_Mrecv(b.data(), 7, pairs, &message, &s);
      record(seen, s, pairs);
      seen.bytes.push_back(b.read());
    }
    if (rank < 2) {
      b.write(pattern(16 * 7, 20 + rank));
      MPI_Status s;
      MPI_Sendrecv_replace(b.data(), 7, pairs, 1 - rank, 8, 1 - rank, 8, MPI_COMM_WORLD, &s);
      record(seen, s, pairs);
      seen.bytes.push_back(b.read());
    }
    MPI_Type_free(&pairs);
  });
}

int bytes_of(const MPI_Status& s) {
  int n = 0;
  MPI_Get_count(&s, MPI_BYTE, &n);
  return n;
}

// `got` is `sent` up to `n` bytes, then the poison.
void expect_prefix(const std::vector<char>& got, const std::vector<char>& sent, std::size_t n,
                   const char* what) {
  std::vector<char> want = poison(got.size());
  std::copy(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(n), want.begin());
  EXPECT_TRUE(got == want) << what << " (rank " << rank_of() << ")";
}

// The in-band protocol (docs/mpi-interposer.md): a device message larger than a note, which
// the receiver reads from the sender's memory (IPC), and any message of exactly a note's
// size, met by every kind of receive and probe in MPI's order. Checked against what was sent
// as well as host against device: the host run carries notes of that size too.
TEST(Interposer, NotesMeetEveryReceiveAndProbeInOrder) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("notes", [](bool device, Seen& seen) {
    constexpr int kNote = 229;  // halox::mpi::kNoteBytes
    constexpr std::size_t kBig = 8000;
    const int rank = rank_of();
    MPI_Datatype strided;  // every other int of 2,000
    MPI_Type_vector(1000, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    if (rank == 0) {
      Buffer note(kNote, device), big(kBig, device);
      note.write(pattern(kNote, 1));
      big.write(pattern(kBig, 2));
      MPI_Send(note.data(), kNote, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Send(big.data(), 6000, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
      MPI_Send(big.data(), 1, strided, 1, 3, MPI_COMM_WORLD);
      MPI_Ssend(note.data(), kNote, MPI_BYTE, 1, 4, MPI_COMM_WORLD);
      MPI_Request r[2];
      MPI_Isend(big.data(), 5000, MPI_BYTE, 1, 5, MPI_COMM_WORLD, &r[0]);
      MPI_Isend(note.data(), 16, MPI_BYTE, 1, 6, MPI_COMM_WORLD, &r[1]);
      MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
      MPI_Request p;  // persistent, restarted on new data
      MPI_Send_init(big.data(), 7000, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &p);
      for (int k = 0; k < 3; ++k) {
        big.write(pattern(kBig, 10 + k));
        MPI_Start(&p);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
      }
      MPI_Request_free(&p);
    } else if (rank == 1) {
      Buffer in(kBig, device), small(16, device);
      MPI_Status s;
      // Probing for the second message takes the first off MPI's queue too; a receive of
      // any tag still meets the first first.
      MPI_Probe(0, 2, MPI_COMM_WORLD, &s);
      record(seen, s, MPI_BYTE);
      EXPECT_EQ(bytes_of(s), 6000);
      in.write(poison(kBig));
      MPI_Recv(in.data(), static_cast<int>(kBig), MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &s);
      record(seen, s, MPI_BYTE);
      EXPECT_EQ(s.MPI_TAG, 1);
      expect_prefix(in.read(), pattern(kNote, 1), kNote, "a note-sized message");
      in.write(poison(kBig));
      MPI_Recv(in.data(), static_cast<int>(kBig), MPI_BYTE, 0, 2, MPI_COMM_WORLD, &s);
      record(seen, s, MPI_BYTE);
      expect_prefix(in.read(), pattern(kBig, 2), 6000, "a probed message");
      // A matched probe of a packed strided message, received into host memory.
      MPI_Message m;
      MPI_Mprobe(0, 3, MPI_COMM_WORLD, &m, &s);
      record(seen, s, strided);
      EXPECT_EQ(bytes_of(s), 4000);
      std::vector<char> host = poison(kBig);
      MPI_Mrecv(host.data(), 1, strided, &m, &s);
      record(seen, s, strided);
      const std::vector<char> sent = pattern(kBig, 2);
      for (std::size_t i = 0; i < kBig; ++i)
        if (host[i] != (i % 8 < 4 ? sent[i] : poison(1)[0])) {
          ADD_FAILURE() << "strided byte " << i;
          break;
        }
      int flag = 0;
      while (!flag) MPI_Iprobe(0, 4, MPI_COMM_WORLD, &flag, &s);
      EXPECT_EQ(bytes_of(s), kNote);
      in.write(poison(kBig));
      MPI_Recv(in.data(), kNote, MPI_BYTE, 0, 4, MPI_COMM_WORLD, &s);
      record(seen, s, MPI_BYTE);
      expect_prefix(in.read(), pattern(kNote, 1), kNote, "a synchronous note-sized message");
      in.write(poison(kBig));
      MPI_Request r[2];
      MPI_Irecv(small.data(), 16, MPI_BYTE, 0, 6, MPI_COMM_WORLD, &r[1]);
      MPI_Irecv(in.data(), static_cast<int>(kBig), MPI_BYTE, 0, 5, MPI_COMM_WORLD, &r[0]);
      MPI_Status both[2];
      MPI_Waitall(2, r, both);
      record(seen, both[0], MPI_BYTE);
      record(seen, both[1], MPI_BYTE);
      expect_prefix(in.read(), pattern(kBig, 2), 5000, "a nonblocking message");
      MPI_Request p;
      MPI_Recv_init(in.data(), static_cast<int>(kBig), MPI_BYTE, 0, 7, MPI_COMM_WORLD, &p);
      for (int k = 0; k < 3; ++k) {
        in.write(poison(kBig));
        MPI_Start(&p);
        MPI_Wait(&p, &s);
        record(seen, s, MPI_BYTE);
        expect_prefix(in.read(), pattern(kBig, 10 + k), 7000, "a persistent message");
      }
      MPI_Request_free(&p);
    }
    MPI_Type_free(&strided);
  });
}

// Irecv; Send; Wait on both sides is legal MPI. A device send that its peer reads itself
// completes when the peer has read it, so each rank's blocked MPI_Send must serve the note
// its own earlier receive got, or both wait forever. Likewise Isend; Wait(send) before
// Wait(recv), and MPI_Sendrecv.
TEST(Interposer, BlockedSendsServeTheirReceives) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("blocked sends", [](bool device, Seen& seen) {
    constexpr std::size_t kBytes = 1 << 16;
    const int rank = rank_of();
    if (rank > 1) return;
    const int peer = 1 - rank;
    Buffer out(kBytes, device), in(kBytes, device);
    for (int round = 0; round < 3; ++round) {
      out.write(pattern(kBytes, 30 + 2 * round + rank));
      in.write(poison(kBytes));
      MPI_Request r, w;
      MPI_Status s;
      if (round < 2)
        MPI_Irecv(in.data(), static_cast<int>(kBytes), MPI_BYTE, peer, round, MPI_COMM_WORLD, &r);
      if (round == 0) {
        MPI_Send(out.data(), static_cast<int>(kBytes), MPI_BYTE, peer, round, MPI_COMM_WORLD);
      } else if (round == 1) {
        MPI_Isend(out.data(), static_cast<int>(kBytes), MPI_BYTE, peer, round, MPI_COMM_WORLD, &w);
        MPI_Wait(&w, MPI_STATUS_IGNORE);
      } else {
        MPI_Sendrecv(out.data(), static_cast<int>(kBytes), MPI_BYTE, peer, 9, in.data(),
                     static_cast<int>(kBytes), MPI_BYTE, peer, 9, MPI_COMM_WORLD, &s);
        record(seen, s, MPI_BYTE);
      }
      if (round < 2) {
        MPI_Wait(&r, &s);
        record(seen, s, MPI_BYTE);
      }
      const std::vector<char> got = in.read();
      EXPECT_TRUE(got == pattern(kBytes, 30 + 2 * round + peer)) << "round " << round;
      seen.bytes.push_back(got);
    }
  });
}

// Polling instead of waiting: Isend; while (!MPI_Test(send)) on both sides, the receives
// posted first; and receives of MPI_ANY_SOURCE from every other rank at once (np3: two
// senders' notes), completed by Waitsome.
TEST(Interposer, PolledSendsAndWildcardReceivesOfNotes) {
  if (size_of() < 2) GTEST_SKIP();
  same_on_host_and_device("polled", [](bool device, Seen& seen) {
    constexpr std::size_t kBytes = 5000;
    const int rank = rank_of(), size = size_of();
    if (rank < 2) {
      const int peer = 1 - rank;
      Buffer out(kBytes, device), in(kBytes, device);
      out.write(pattern(kBytes, 50 + rank));
      in.write(poison(kBytes));
      MPI_Request r, w;
      MPI_Irecv(in.data(), static_cast<int>(kBytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD, &r);
      MPI_Isend(out.data(), static_cast<int>(kBytes), MPI_BYTE, peer, 3, MPI_COMM_WORLD, &w);
      int done = 0;
      while (!done) MPI_Test(&w, &done, MPI_STATUS_IGNORE);
      MPI_Status s;
      MPI_Wait(&r, &s);
      record(seen, s, MPI_BYTE);
      const std::vector<char> got = in.read();
      EXPECT_TRUE(got == pattern(kBytes, 50 + peer));
      seen.bytes.push_back(got);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // Every rank but 0 sends rank 0 one message; rank 0 takes them from any source.
    if (rank == 0) {
      std::vector<std::unique_ptr<Buffer>> in;
      std::vector<MPI_Request> requests(static_cast<std::size_t>(size - 1));
      for (int k = 0; k < size - 1; ++k) {
        in.push_back(std::make_unique<Buffer>(kBytes, device));
        in.back()->write(poison(kBytes));
        MPI_Irecv(in.back()->data(), static_cast<int>(kBytes), MPI_BYTE, MPI_ANY_SOURCE, 4,
                  MPI_COMM_WORLD, &requests[static_cast<std::size_t>(k)]);
      }
      std::vector<int> from(static_cast<std::size_t>(size - 1), -1);
      int left = size - 1;
      while (left > 0) {
        int count = 0;
        std::vector<int> indices(static_cast<std::size_t>(size - 1));
        std::vector<MPI_Status> statuses(static_cast<std::size_t>(size - 1));
        MPI_Waitsome(size - 1, requests.data(), &count, indices.data(), statuses.data());
        for (int k = 0; k < count; ++k) {
          from[static_cast<std::size_t>(indices[static_cast<std::size_t>(k)])] =
              statuses[static_cast<std::size_t>(k)].MPI_SOURCE;
          int bytes = 0;
          MPI_Get_count(&statuses[static_cast<std::size_t>(k)], MPI_BYTE, &bytes);
          EXPECT_EQ(bytes,
                    static_cast<int>(kBytes) - statuses[static_cast<std::size_t>(k)].MPI_SOURCE);
        }
        left -= count;
      }
      for (int k = 0; k < size - 1; ++k) {
        const int source = from[static_cast<std::size_t>(k)];
        ASSERT_GE(source, 1);
        const std::size_t n = kBytes - static_cast<std::size_t>(source);
        expect_prefix(in[static_cast<std::size_t>(k)]->read(), pattern(kBytes, 60 + source), n,
                      "a wildcard receive");
      }
      seen.numbers.push_back(size - 1);
    } else {
      Buffer out(kBytes, device);
      out.write(pattern(kBytes, 60 + rank));
      MPI_Send(out.data(), static_cast<int>(kBytes) - rank, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    }
  });
}

// Every message from a new allocation, freed after it, small and large, several alive at once:
// the receiver's cached mappings of freed allocations, and the driver's one mapping per block
// that small allocations share ("resource already mapped" on the H100 before 2026-12-05).
TEST(Interposer, FreshAllocationsForEveryMessage) {
  if (size_of() < 2 || rank_of() > 1) {
    same_on_host_and_device("fresh allocations", [](bool, Seen&) {});
    return;
  }
  same_on_host_and_device("fresh allocations", [](bool device, Seen& seen) {
    const int peer = 1 - rank_of();
    std::vector<std::unique_ptr<Buffer>> alive;
    for (int k = 0; k < 40; ++k) {
      const std::size_t bytes = 300 + static_cast<std::size_t>(k % 7) * 4099 + (k % 3) * (1 << 20);
      auto out = std::make_unique<Buffer>(bytes, device);
      Buffer in(bytes, device);
      out->write(pattern(bytes, k + 10 * rank_of()));
      in.write(poison(bytes));
      MPI_Status s;
      MPI_Sendrecv(out->data(), static_cast<int>(bytes), MPI_BYTE, peer, k, in.data(),
                   static_cast<int>(bytes), MPI_BYTE, peer, k, MPI_COMM_WORLD, &s);
      record(seen, s, MPI_BYTE);
      const std::vector<char> got = in.read();
      EXPECT_TRUE(got == pattern(bytes, k + 10 * peer)) << "message " << k;
      if (k % 5 == 0) seen.bytes.push_back(got);
      if (k % 4 == 0) alive.push_back(std::move(out));  // some stay mapped by the peer
    }
  });
}

// osu_bw's pattern: a window of receives and sends completed by one MPI_Waitall, whose notes
// are served as a batch (their copies waited for once, the acknowledgements held till then),
// both ranks sending at once; then the same window through MPI_Testall and MPI_Waitsome.
TEST(Interposer, WindowsOfNotesCompletedTogether) {
  if (size_of() < 2 || rank_of() > 1) {
    same_on_host_and_device("windows", [](bool, Seen&) {});
    return;
  }
  same_on_host_and_device("windows", [](bool device, Seen& seen) {
    constexpr int kWindow = 16;
    const int peer = 1 - rank_of();
    for (int round = 0; round < 3; ++round) {
      std::vector<std::unique_ptr<Buffer>> out, in;
      std::vector<MPI_Request> requests(2 * kWindow);
      for (int k = 0; k < kWindow; ++k) {
        const std::size_t bytes = 1000 + static_cast<std::size_t>(k) * 777;
        out.push_back(std::make_unique<Buffer>(bytes, device));
        in.push_back(std::make_unique<Buffer>(bytes, device));
        out.back()->write(pattern(bytes, 100 * round + k + 50 * rank_of()));
        in.back()->write(poison(bytes));
        MPI_Irecv(in.back()->data(), static_cast<int>(bytes), MPI_BYTE, peer, k, MPI_COMM_WORLD,
                  &requests[static_cast<std::size_t>(k)]);
      }
      for (int k = 0; k < kWindow; ++k)
        MPI_Isend(out[static_cast<std::size_t>(k)]->data(),
                  static_cast<int>(1000 + static_cast<std::size_t>(k) * 777), MPI_BYTE, peer, k,
                  MPI_COMM_WORLD, &requests[static_cast<std::size_t>(kWindow + k)]);
      std::vector<MPI_Status> statuses(requests.size());
      if (round == 0) {
        MPI_Waitall(2 * kWindow, requests.data(), statuses.data());
      } else if (round == 1) {
        int done = 0;
        while (!done) MPI_Testall(2 * kWindow, requests.data(), &done, statuses.data());
      } else {
        int left = 2 * kWindow;
        std::vector<int> indices(requests.size());
        std::vector<MPI_Status> some(requests.size());
        while (left > 0) {
          int count = 0;
          MPI_Waitsome(2 * kWindow, requests.data(), &count, indices.data(), some.data());
          for (int i = 0; i < count; ++i)
            statuses[static_cast<std::size_t>(indices[static_cast<std::size_t>(i)])] =
                some[static_cast<std::size_t>(i)];
          left -= count;
        }
      }
      for (int k = 0; k < kWindow; ++k) {
        record(seen, statuses[static_cast<std::size_t>(k)], MPI_BYTE);
        const std::size_t bytes = 1000 + static_cast<std::size_t>(k) * 777;
        const std::vector<char> got = in[static_cast<std::size_t>(k)]->read();
        EXPECT_TRUE(got == pattern(bytes, 100 * round + k + 50 * peer))
            << "round " << round << " message " << k;
        if (k % 5 == 0) seen.bytes.push_back(got);
      }
    }
  });
}

TEST(Interposer, PackUnpackAndAbsoluteAddresses) {
  same_on_host_and_device("pack", [](bool device, Seen& seen) {
    MPI_Datatype every_third;
    MPI_Type_vector(30, 1, 3, MPI_SHORT, &every_third);
    MPI_Type_commit(&every_third);
    Buffer b(180, device), packed(64 + 60, device);
    b.write(pattern(180, 4));
    packed.write(poison(124));
    int position = 4;
    MPI_Pack(b.data(), 1, every_third, packed.data(), 124, &position, MPI_COMM_WORLD);
    seen.numbers.push_back(position);
    seen.bytes.push_back(packed.read());
    b.write(poison(180));
    position = 4;
    MPI_Unpack(packed.data(), 124, &position, b.data(), 1, every_third, MPI_COMM_WORLD);
    seen.numbers.push_back(position);
    seen.bytes.push_back(b.read());
    // MPI_BOTTOM with the device buffer's absolute address in the type, to oneself.
    MPI_Aint at = 0;
    MPI_Get_address(b.data() + 4, &at);  // its last short ends at byte 180
    MPI_Datatype absolute;
    const int one = 1;
    MPI_Type_create_struct(1, &one, &at, &every_third, &absolute);
    MPI_Type_commit(&absolute);
    Buffer got(60, device);
    got.write(poison(60));
    MPI_Sendrecv(MPI_BOTTOM, 1, absolute, rank_of(), 2, got.data(), 60, MPI_BYTE, rank_of(), 2,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    seen.bytes.push_back(got.read());
    MPI_Type_free(&absolute);
    MPI_Type_free(&every_third);
  });
}

TEST(Interposer, BlockingCollectives) {
  same_on_host_and_device("collectives", [](bool device, Seen& seen) {
    const int n = size_of(), rank = rank_of();
    constexpr int k = 6;  // doubles per rank
    std::vector<char> mine = pattern(8 * k, rank);
    for (std::size_t i = 0; i < mine.size(); i += 8) mine[i + 7] = 0x3f;  // finite doubles
    Buffer in(8 * k * n, device), out(8 * k * n, device);
    auto reset = [&] {
      std::vector<char> all;
      for (int r = 0; r < n; ++r) all.insert(all.end(), mine.begin(), mine.end());
      in.write(all);
      out.write(poison(8 * k * n));
    };
    std::vector<int> counts(n), displs(n);
    for (int r = 0; r < n; ++r) {
      counts[r] = 1 + (r + rank) % k;
      displs[r] = r * k;
    }
    std::vector<int> gathered(n), gdispls(n);
    for (int r = 0; r < n; ++r) {
      gathered[r] = 1 + r % k;
      gdispls[r] = r * k;
    }
    reset();
    MPI_Bcast(in.data(), k, MPI_DOUBLE, n - 1, MPI_COMM_WORLD);
    seen.bytes.push_back(in.read());
    reset();
    MPI_Reduce(in.data(), out.data(), k, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Allreduce(in.data(), out.data(), k, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Allreduce(MPI_IN_PLACE, in.data(), k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    seen.bytes.push_back(in.read());
    reset();
    MPI_Gather(in.data(), k, MPI_DOUBLE, out.data(), k, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Gatherv(in.data(), 1 + rank % k, MPI_DOUBLE, out.data(), gathered.data(), gdispls.data(),
                MPI_DOUBLE, 0, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Scatter(in.data(), k, MPI_DOUBLE, out.data(), k, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Scatterv(in.data(), gathered.data(), gdispls.data(), MPI_DOUBLE, out.data(), 1 + rank % k,
                 MPI_DOUBLE, 0, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Allgather(in.data(), k, MPI_DOUBLE, out.data(), k, MPI_DOUBLE, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Allgatherv(in.data(), 1 + rank % k, MPI_DOUBLE, out.data(), gathered.data(), gdispls.data(),
                   MPI_DOUBLE, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    reset();
    MPI_Alltoall(in.data(), k, MPI_DOUBLE, out.data(), k, MPI_DOUBLE, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
    // Alltoallv: rank r sends counts[s] to s; s receives what r sends it.
    std::vector<int> rcounts(n);
    for (int r = 0; r < n; ++r) rcounts[r] = 1 + (rank + r) % k;
    reset();
    MPI_Alltoallv(in.data(), counts.data(), displs.data(), MPI_DOUBLE, out.data(), rcounts.data(),
                  displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
    seen.bytes.push_back(out.read());
  });
}

// Two threads, each with its own communicator, exchanging device buffers at once: the
// interposer's request table, type cache and staging pool are shared between them.
TEST(Interposer, ThreadsOnTheirOwnCommunicators) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (size_of() < 2 || provided < MPI_THREAD_MULTIPLE) GTEST_SKIP();
  const int rank = rank_of();
  constexpr int kThreads = 2, kRounds = 200, kInts = 257;
  std::vector<MPI_Comm> comms(kThreads);
  for (MPI_Comm& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MPI_Datatype strided;
      MPI_Type_vector(kInts, 1, 2, MPI_INT, &strided);
      MPI_Type_commit(&strided);
      Buffer out(8 * kInts, true), in(8 * kInts, true);
      for (int round = 0; round < kRounds && rank < 2; ++round) {
        const std::vector<char> sent = pattern(8 * kInts, 1000 * t + round + 7 * rank);
        out.write(sent);
        in.write(poison(8 * kInts));
        MPI_Request r[2];
        MPI_Irecv(in.data(), 1, strided, 1 - rank, round, comms[t], &r[0]);
        MPI_Isend(out.data(), 1, strided, 1 - rank, round, comms[t], &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        const std::vector<char> expected_from =
            pattern(8 * kInts, 1000 * t + round + 7 * (1 - rank));
        const std::vector<char> got = in.read();
        for (int k = 0; k < kInts; ++k)
          if (std::memcmp(&got[8 * k], &expected_from[8 * k], 4) != 0 ||
              got[8 * k + 4] != static_cast<char>(0xA5))
            ++wrong[t];
      }
      MPI_Type_free(&strided);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  for (MPI_Comm& c : comms) MPI_Comm_free(&c);
}

#if HALOX_TEST_DEVICE_MEMORY
// Managed memory goes to the MPI library as host memory (the CPU reads it): sent and
// received between the ranks, it arrives as host memory does.
TEST(Interposer, ManagedMemoryIsPassedThrough) {
  if (size_of() < 2) GTEST_SKIP();
  const int rank = rank_of();
  constexpr std::size_t kBytes = 4096;
  char* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, kBytes), cudaSuccess);
  const std::vector<char> sent = pattern(kBytes, 77);
  if (rank == 0) {
    std::memcpy(managed, sent.data(), kBytes);
    MPI_Send(managed, static_cast<int>(kBytes), MPI_BYTE, 1, 31, MPI_COMM_WORLD);
  } else if (rank == 1) {
    std::memset(managed, 0x5A, kBytes);
    MPI_Recv(managed, static_cast<int>(kBytes), MPI_BYTE, 0, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(std::memcmp(managed, sent.data(), kBytes), 0);
  }
  cudaFree(managed);
}
#endif

TEST(Interposer, UncoveredCallsOnDeviceMemoryAreErrorsNamingThem) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  Buffer b(64, true);
  MPI_Request r;
  const int rc = MPI_Ibcast(b.data(), 8, MPI_INT, 0, comm, &r);
  EXPECT_NE(rc, MPI_SUCCESS);
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  EXPECT_NE(std::string(text).find("MPI_Ibcast on device memory is not covered"), std::string::npos)
      << text;
  Buffer out(64, true);
  const int scan = MPI_Scan(b.data(), out.data(), 8, MPI_INT, MPI_SUM, comm);
  MPI_Error_string(scan, text, &length);
  EXPECT_NE(std::string(text).find("MPI_Scan on device memory is not covered"), std::string::npos)
      << text;
  // The same call on host memory is the library's.
  std::vector<int> in(8, 1), sums(8, 0);
  EXPECT_EQ(MPI_Scan(in.data(), sums.data(), 8, MPI_INT, MPI_SUM, comm), MPI_SUCCESS);
  EXPECT_EQ(sums[0], rank_of(comm) + 1);
  MPI_Comm_free(&comm);
}

// Random datatypes (the generator of the datatype tests): a device buffer sent with the
// type arrives as MPI_Pack of the same bytes would; received with the type into a device
// buffer it lands as MPI's own receive into host memory does.
TEST(Interposer, RandomTypesSentAndReceivedAsMpiDoes) {
  if (size_of() < 2) GTEST_SKIP();
  const int rank = rank_of();
  halox::testing::RecipeGenerator gen(halox::testing::test_seed("Interposer.RandomTypes"));
  const long n_types = halox::testing::env_count("HALOX_INTERPOSER_TYPES", 150);
  long checked = 0, received = 0;
  for (long i = 0; i < n_types; ++i) {
    const halox::testing::Recipe recipe = gen.random(3);
    MPI_Datatype t = halox::testing::to_mpi(recipe);
    MPI_Type_commit(&t);
    MPI_Aint lb, extent, true_lb, true_extent;
    MPI_Type_get_extent(t, &lb, &extent);
    MPI_Type_get_true_extent(t, &true_lb, &true_extent);
    int size = 0;
    MPI_Type_size(t, &size);
    const int count = 1 + static_cast<int>(gen.uniform(0, 2));
    const std::int64_t a = 0, z = (count - 1) * static_cast<std::int64_t>(extent);
    const std::int64_t lo = std::min(a, z) + true_lb, hi = std::max(a, z) + true_lb + true_extent;
    if (size == 0 || hi - lo > (1 << 20) || static_cast<std::int64_t>(size) * count > (1 << 20)) {
      free_type(t);
      continue;
    }
    const std::size_t span = static_cast<std::size_t>(hi - lo);
    const std::vector<char> data = pattern(span, static_cast<int>(i));
    const std::size_t packed_bytes = static_cast<std::size_t>(size) * count;
    // A receive into a type that addresses some byte twice is erroneous in MPI (halox's
    // unpack refuses it with an MPI error), so these are only sent.
    const bool receivable = !halox::testing::to_halox(recipe).commit().overlaps(count);
    const std::string what =
        "type #" + std::to_string(i) + " x" + std::to_string(count) + ": " + recipe.describe();
    if (rank == 0) {
      Buffer device(span, true);
      device.write(data);
      MPI_Send(device.data() - lo, count, t, 1, 1, MPI_COMM_WORLD);
      std::vector<char> expected(packed_bytes);
      int position = 0;
      MPI_Pack(data.data() - lo, count, t, expected.data(), static_cast<int>(packed_bytes),
               &position, MPI_COMM_WORLD);
      MPI_Send(expected.data(), static_cast<int>(packed_bytes), MPI_BYTE, 1, 2, MPI_COMM_WORLD);
    } else if (rank == 1) {
      std::vector<char> got(packed_bytes, static_cast<char>(0xA5)), expected(packed_bytes);
      MPI_Recv(got.data(), static_cast<int>(packed_bytes), MPI_BYTE, 0, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      MPI_Recv(expected.data(), static_cast<int>(packed_bytes), MPI_BYTE, 0, 2, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      EXPECT_TRUE(got == expected) << "sent from device memory: " << what;
      ++checked;
      if (!receivable) {
        free_type(t);
        continue;
      }
      // Back: the packed bytes into a device buffer and into a host one, both poisoned.
      Buffer device(span, true);
      std::vector<char> host = poison(span);
      device.write(host);
      MPI_Sendrecv(expected.data(), static_cast<int>(packed_bytes), MPI_BYTE, 1, 3,
                   device.data() - lo, count, t, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Sendrecv(expected.data(), static_cast<int>(packed_bytes), MPI_BYTE, 1, 4,
                   host.data() - lo, count, t, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      EXPECT_TRUE(device.read() == host) << "received into device memory: " << what;
      ++received;
    }
    free_type(t);
    if (::testing::Test::HasFailure()) break;
  }
  if (rank == 1) {
    std::printf(
        "interposer: %ld random types sent from device memory, %ld also received into "
        "it (the others address some byte twice), all as MPI does\n",
        checked, received);
    EXPECT_GT(checked, n_types / 3);
  }
}

}  // namespace

// A note whose promised bytes never come (its sender stalled or died between the two): the
// receive ends after HALOX_MPI_TIMEOUT (3 s in these tests) with an MPI error naming both
// ranks, not a hang. The note is made by hand and sent past the interposer (PMPI_Send). Last
// in the file: its sequence number is one no later message of rank 1 uses.
TEST(Interposer, APromiseNotKeptIsANamedErrorNotAHang) {
  if (size_of() < 2) GTEST_SKIP();
  const char* limit = std::getenv("HALOX_MPI_TIMEOUT");
  if (limit == nullptr || std::atof(limit) > 10) GTEST_SKIP() << "needs a short HALOX_MPI_TIMEOUT";
  // A side note whose bytes never come, and a chunked note of 3 chunks none of which comes:
  // each receive ends in an error naming the sender, after the time-out.
  for (const bool chunked : {false, true}) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_of() == 1) {
      halox::mpi::Note note;
      note.kind = chunked ? halox::mpi::NoteKind::chunks : halox::mpi::NoteKind::side;
      note.sender = 1;
      note.bytes = chunked ? 3 * (64 << 10) : halox::mpi::kNoteBytes;
      note.chunk = 64 << 10;
      note.seq = chunked ? 1000004 : 1000003;
      std::vector<char> bytes(halox::mpi::kNoteBytes, 0);
      std::memcpy(bytes.data(), &note, sizeof note);
      PMPI_Send(bytes.data(), halox::mpi::kNoteBytes, MPI_BYTE, 0, 77, MPI_COMM_WORLD);
    } else if (rank_of() == 0) {
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      std::vector<char> in(256 << 10);
      const auto began = std::chrono::steady_clock::now();
      const int rc = MPI_Recv(in.data(), static_cast<int>(in.size()), MPI_BYTE, 1, 77,
                              MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
      ASSERT_NE(rc, MPI_SUCCESS);
      char text[MPI_MAX_ERROR_STRING];
      int length = 0;
      MPI_Error_string(rc, text, &length);
      const std::string message(text, static_cast<std::size_t>(length));
      EXPECT_NE(message.find("rank 0 waited"), std::string::npos) << message;
      EXPECT_NE(message.find("is rank 1 stalled or dead"), std::string::npos) << message;
      if (chunked) EXPECT_NE(message.find("chunk 1 of 3"), std::string::npos) << message;
      EXPECT_GE(waited, std::atof(limit) - 0.1);
      EXPECT_LT(waited, std::atof(limit) + 5);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
