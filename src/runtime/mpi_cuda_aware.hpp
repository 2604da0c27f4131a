// Whether the MPI library moves device memory itself. A translation unit of its own: the MPI
// interposer asks it too, and must not pull the transports (and their device code) in.
#pragma once

namespace halox::detail {

/// Open MPI's MPIX_Query_cuda_support where the library has it; false otherwise.
bool mpi_is_cuda_aware();

}  // namespace halox::detail
