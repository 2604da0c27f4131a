// What a kernel sees of one link through the host proxy (transport/host_proxy.hpp), in a
// header without MPI: the particle kernels' host side (device_halo.cu) is built without it too.
#pragma once

#include <cstdint>
#include <string>

namespace halox::detail {

/// The device's view of one proxied op (device pointers into mapped host memory).
struct ProxyEnds {
  char* send_staging = nullptr;
  unsigned long long* packed = nullptr;  // the sender kernel's data signal
  unsigned long long* ready = nullptr;   // the proxy's: the send staging is free
  char* recv_staging = nullptr;
  unsigned long long* data = nullptr;      // the proxy's: the face has arrived
  unsigned long long* released = nullptr;  // the receiver kernel's: its staging is free
};

/// One op's link through the proxy: what it sends (send_rank >= 0) and receives.
struct ProxyLinkPlan {
  int op = 0;  // the op's index: its MPI tag, alike on both ends
  int send_rank = -1, recv_rank = -1;
  std::int64_t send_bytes = 0, recv_bytes = 0;
  // Staging allocated for the faces (0: their size): room for the larger faces of later plans
  // (a transport whose plans change, the particles', keeps its proxy while they fit; resize).
  std::int64_t send_capacity = 0, recv_capacity = 0;
  std::string name;  // the op's, for errors
};

}  // namespace halox::detail
