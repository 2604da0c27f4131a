// Every MPI tag halox uses, in one place. They travel only on halox's duplicate of the
// user's communicator (Topology::from_mpi), so they cannot meet a user's message; keeping
// them apart from each other (ranges hundreds of pulses wide) lets a message of one phase
// never match another's.
#pragma once

namespace halox::detail::tags {

constexpr int kMigrate = 300;           ///< + 4 * axis + 0..3 (counts and atoms, both ways)
constexpr int kGridPulse = 500;         ///< + pulse
constexpr int kParticleForward = 1000;  ///< + pulse
constexpr int kParticleReverse = 2000;  ///< + pulse
constexpr int kPlanCheck = 7000;        ///< + pulse (validate_plan's send sizes)
constexpr int kPeerBlocks = 9100;       ///< PeerHalo's block addresses
constexpr int kNvshmemOffsets = 9200;   ///< + op (the NVSHMEM transport's receive offsets)
constexpr int kHostProxy = 9300;        ///< + op (the fused grid kernel's host-proxied faces)
constexpr int kHostProxyProbe = 9400;   ///< + op (their self-test)
constexpr int kRollCall = 9500;         ///< a timed-out collective's roll call (+1: the verdict)
constexpr int kBlockShift = 10000;      ///< + 2 x receiver's index (+1: the data): plan builds
                                        ///< and migrations over Ranks::blocks

}  // namespace halox::detail::tags
