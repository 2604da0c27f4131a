// NCCL's pointer to a peer's part of a symmetric window (nccl-device's LSA mapping). NCCL's
// device API gives it only on the device (ncclGetPeerPointer reads the window's device
// record), so a one-thread kernel asks; at set-up only.
#pragma once

#include <nccl.h>

namespace halox::detail {

/// `peer`'s (LSA rank) pointer for `window`, returned through `word`, one device word that
/// the caller owns; done when it returns.
void* nccl_peer_pointer(ncclWindow_t window, int peer, void** word);

}  // namespace halox::detail
