// The checks an exchange makes of the plans it is given (no communication): a plan edited or
// built by hand that would read or write outside its arrays is an error naming the rank, the
// pulse and what is wrong, never a heap overflow in a pack or a kernel.
#pragma once

#include "halox/plan.hpp"

namespace halox::detail {

/// Every pulse's send and receive types committed and their sizes those of the header (a
/// header that says more or less than its type moves would make the receiver read past its
/// buffer).
void check_grid_plan(const GridPlan& plan, int rank, const char* where);

/// Counts consistent (home <= total), every received range inside [home, total), every
/// sent index inside the items the pulse can send, sizes those of the header.
void check_particle_plan(const ParticlePlan& plan, int rank, const char* where);

}  // namespace halox::detail
