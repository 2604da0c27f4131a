// halox: the whole public API in one include. Datatypes and packing, rank grids and plans,
// the grid and particle exchanges over every transport and both localities of ranks (one
// per process, or many in this process), tracing, tuning and the error types; MPI
// interoperability when this build has MPI (halox/config.hpp says what it has).
#pragma once

#include "halox/config.hpp"
#include "halox/datatype.hpp"
#include "halox/device.hpp"
#include "halox/error.hpp"
#include "halox/exchange.hpp"
#include "halox/info.hpp"
#include "halox/pack.hpp"
#include "halox/pack_gpu.hpp"
#include "halox/plan.hpp"
#include "halox/topology.hpp"
#include "halox/trace.hpp"
#include "halox/tuning.hpp"
#if HALOX_HAS_MPI
#include "halox/mpi.hpp"
#endif
