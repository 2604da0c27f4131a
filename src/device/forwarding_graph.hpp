// Where the fused particle kernels (device_halo.cu) read forwarded items from. Host-only,
// so that the CPU tests check it against a plain simulation of the host transport.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "device_halo.hpp"
#include "halox/error.hpp"
#include "halox/plan.hpp"

namespace halox::detail {

// Item i of pulse q's staging area, as one int: i << 5 | q (kMaxPulses is 32).
constexpr int kPulseBits = 5, kPulseMask = (1 << kPulseBits) - 1;
static_assert(kMaxPulses <= (1 << kPulseBits));
constexpr int staging_code(long long i, int q) {
  return static_cast<int>(i << kPulseBits) | q;
}

// Where the fused kernels read forwarded items from. The ranks of one launch read each
// other's arrays, so an item whose every hop was between ranks of this launch is read at
// its origin: forward, some launch rank's home coordinates plus the shifts of the pulses it
// went through, added in pulse order (the float additions the copies would make); reverse,
// the forces the hops would return, summed from the launch ranks' own forces. Only hops
// from ranks outside the launch are waited for, through their staging and data signals; an
// item that reaches one through another launch rank falls back to its first hop's staging.
// What a rank outside the launch returns for such an item sent to it (its origin in the
// launch) is added by the unpack straight into the origin's home force, so no pulse
// waits for it to sum it on the way back (returned_terms leaves it out).
class ForwardingGraph {
 public:
  ForwardingGraph(const std::vector<int>& ranks, const std::vector<const ParticlePlan*>& plans)
      : m_ranks(ranks), m_plans(plans), m_start(plans.size()), m_forwarders(plans.size()) {
    for (std::size_t k = 0; k < plans.size(); ++k) {
      // Who forwarded each halo item (later pulses first), as (q, j): send_index_q[j] is it.
      const ParticlePlan& plan = *plans[k];
      const std::int64_t halo = plan.total_count - plan.home_count;
      std::vector<int>& start = m_start[k];
      start.assign(halo + 1, 0);
      for (const ParticlePulse& pq : plan.pulses) {
        for (std::size_t j = static_cast<std::size_t>(pq.first_forwarded); j < pq.send_index.size();
             ++j)
          ++start[pq.send_index[j] - plan.home_count + 1];
      }
      for (std::int64_t i = 0; i < halo; ++i) start[i + 1] += start[i];
      m_forwarders[k].resize(static_cast<std::size_t>(start[halo]));
      std::vector<int> next(start.begin(), start.end() - 1);
      for (int q = static_cast<int>(plan.pulses.size()) - 1; q >= 0; --q) {
        const ParticlePulse& pq = plan.pulses[q];
        if (pq.send_index.size() >= (std::size_t{1} << (31 - kPulseBits))) {
          throw Error("halox: a GPU halo pulse sends more than 2^26 items");
        }
        for (std::size_t j = static_cast<std::size_t>(pq.first_forwarded); j < pq.send_index.size();
             ++j)
          m_forwarders[k][next[pq.send_index[j] - plan.home_count]++] = {q, static_cast<int>(j)};
      }
    }
  }

  /// Forward, item j of launch rank k's pulse p (a forwarded one): appends (launch rank or -1
  /// for k's staging, item or staging code, shift start << 5 | shift count) to `source` and
  /// the shifts to `shifts` (launch rank << 5 | pulse, in pulse order); adds the pulses of k
  /// to wait for to `deps`.
  void forward_source(int k, int p, std::size_t j, std::vector<int>& source,
                      std::vector<int>& shifts, unsigned& deps) const {
    std::vector<int>& hops = m_hops;  // (sender << 5 | pulse), latest first
    hops.clear();
    int at_rank = k, first_q = -1;
    std::int64_t i = m_plans[k]->pulses[p].send_index[j], first_at = 0;
    auto emit = [&](int rank, std::int64_t index) {
      source.push_back(rank);
      source.push_back(static_cast<int>(index));
      source.push_back(static_cast<int>(shifts.size()) << kPulseBits |
                       static_cast<int>(hops.size()));
      shifts.insert(shifts.end(), hops.rbegin(), hops.rend());
    };
    for (;;) {
      const ParticlePlan& plan = *m_plans[at_rank];
      if (i < plan.home_count) return emit(at_rank, i);
      const int q = plan.pulse_of(i);
      const std::int64_t at = i - plan.pulses[q].recv_offset;
      if (first_q < 0) first_q = q, first_at = at;
      const int from = local_of(plan.pulses[q].header.recv_rank);
      if (from < 0) {
        // From outside the launch: its staging, if it arrived here; else my first hop's.
        if (at_rank != k) hops.clear();
        deps |= 1u << (at_rank == k ? q : first_q);
        return emit(-1, at_rank == k ? staging_code(at, q) : staging_code(first_at, first_q));
      }
      hops.push_back(from << kPulseBits | q);  // the sender adds its shift of pulse q
      i = m_plans[from]->pulses[q].send_index[at];
      at_rank = from;
    }
  }

  /// Whether item j of launch rank k's pulse p (a forwarded one) has its origin in the
  /// launch: every hop that brought it to k was between launch ranks (forward_source then
  /// gives that origin; the reverse's unpack adds what comes back for it there).
  bool origin_in_launch(int k, int p, std::size_t j) const {
    int at_rank = k;
    std::int64_t i = m_plans[k]->pulses[p].send_index[j];
    for (;;) {
      const ParticlePlan& plan = *m_plans[at_rank];
      if (i < plan.home_count) return true;
      const int q = plan.pulse_of(i);
      const int from = local_of(plan.pulses[q].header.recv_rank);
      if (from < 0) return false;
      i = m_plans[from]->pulses[q].send_index[i - plan.pulses[q].recv_offset];
      at_rank = from;
    }
  }

  /// Whether a later pulse forwarded halo item `slot` of launch rank k.
  bool forwarded(int k, std::int64_t slot) const {
    const std::int64_t h = slot - m_plans[k]->home_count;
    return m_start[k][h] != m_start[k][h + 1];
  }

  /// Reverse: appends the terms of what the later pulses return for halo item `slot` of
  /// launch rank `at_rank` (besides its own force) as pairs (launch rank, item) or (-1,
  /// staging code of k); adds the pulses of k to wait for to `deps`. What ranks outside the
  /// launch return for an item whose origin is in the launch is no term: the unpack adds
  /// it at the origin. False (nothing appended) if a term would be a pulse from outside the
  /// launch at a rank other than k.
  bool returned_terms(int k, int at_rank, std::int64_t slot, std::vector<int>& terms,
                      unsigned& deps) const {
    const ParticlePlan& plan = *m_plans[at_rank];
    const std::int64_t h = slot - plan.home_count;
    const std::size_t mark = terms.size();
    unsigned more = 0;
    for (int c = m_start[at_rank][h]; c < m_start[at_rank][h + 1]; ++c) {
      const auto [q, j] = m_forwarders[at_rank][c];
      const int to = local_of(plan.pulses[q].header.send_rank);
      if (to >= 0) {
        const std::int64_t delivered = m_plans[to]->pulses[q].recv_offset + j;
        const std::size_t before = terms.size();
        terms.push_back(to);
        terms.push_back(static_cast<int>(delivered));
        if (returned_terms(k, to, delivered, terms, more)) continue;
        terms.resize(before);
      } else if (origin_in_launch(at_rank, q, static_cast<std::size_t>(j))) {
        continue;  // returned from outside straight to its origin
      }
      if (at_rank != k) {
        terms.resize(mark);
        return false;
      }
      terms.push_back(-1);
      terms.push_back(staging_code(j, q));
      more |= 1u << q;
    }
    deps |= more;
    return true;
  }

 private:
  int local_of(int rank) const {
    const auto it = std::find(m_ranks.begin(), m_ranks.end(), rank);
    return rank < 0 || it == m_ranks.end() ? -1 : static_cast<int>(it - m_ranks.begin());
  }
  const std::vector<int>& m_ranks;
  const std::vector<const ParticlePlan*>& m_plans;
  std::vector<std::vector<int>> m_start;
  std::vector<std::vector<std::pair<int, int>>> m_forwarders;
  mutable std::vector<int> m_hops;  // forward_source's scratch: no allocation per item
};

}  // namespace halox::detail
