// halox-lbm's run and its report: the steps with progress, the MLUPS against the bandwidth
// bound measured in the same run, the physics checks (Taylor-Green decay, conservation,
// Laplace's pressure jump), and the fields, slice and JSON written where asked.
#pragma once

#include "../common/watchdog.hpp"
#include "cli.hpp"
#include "decomposition.hpp"

namespace halox::lbm {

/// Runs cli.steps steps and reports (rank 0); returns the exit code (1 when a check failed).
int drive(Decomposition& lbm, const Cli& cli, int rank, halox::apps::Watchdog& watchdog);

}  // namespace halox::lbm
