// GPU-initiated grid halos: the ipc-* and nvshmem-* transports of GridExchange (one fused
// kernel per stage, direct stores into the neighbours' staging; see grid_fused.cu).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "peer_halo.hpp"
#include "transport.hpp"

namespace halox::detail {

/// Over the ranks of this process (Ranks::mpi: one; Ranks::blocks: a block of them; links
/// within the process are copy faces of the same launch). `name` is the transport's name in
/// messages, `trace_name` the exchange's in traces (ExchangeOptions::name); ops must carry
/// their datatypes. Collective over ranks.processes() on first use (maps the neighbouring
/// processes' blocks, the proxied ones through the host proxy, one rank per process only;
/// self-test of every link when `self_test`).
std::unique_ptr<Transport> make_grid_fused_transport(const Ranks& ranks, Mapping mapping,
                                                     ProxyPolicy proxy, const std::string& name,
                                                     const std::string& trace_name,
                                                     double timeout_seconds, bool self_test);

}  // namespace halox::detail
