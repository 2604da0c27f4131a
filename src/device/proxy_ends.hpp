// What a kernel sees of one link through the host proxy (transport/host_proxy.hpp), in a
// header without MPI: the particle kernels' host side (device_halo.cu) is built without it too.
#pragma once

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

}  // namespace halox::detail
