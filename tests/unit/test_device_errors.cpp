// The device channel's error records turned into exceptions (src/device/errors.cpp): a wait
// that timed out becomes a HaloTimeoutError whose message and rank(), peer() and pulse() name
// who waited for whom on which pulse; a graph replayed on an old plan becomes a plain Error
// saying to capture again.
#include <gtest/gtest.h>

#include <string>

#include "../../src/device/errors.hpp"
#include "halox/error.hpp"

using namespace halox;

namespace {

detail::ErrorWording wording() {
  detail::ErrorWording w;
  w.transport = "local-fused";
  w.timeout_seconds = 0.5;
  w.pulse = [](int rank, int pulse) {
    return "pulse " + std::to_string(pulse) + " (y+ #" + std::to_string(rank % 2) + ")";
  };
  w.waited_for = [](int) { return std::string("the halo data"); };
  return w;
}

TEST(DeviceErrors, ATimedOutWaitNamesRankPeerAndPulseApart) {
  const detail::ErrorRecord record{1, 2, 5, 3, 0, 7ull << 32, 8ull << 32};
  try {
    detail::check_device_error(record, wording());
    FAIL() << "no exception";
  } catch (const HaloTimeoutError& e) {
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.peer(), 5);
    EXPECT_EQ(e.pulse(), "pulse 3 (y+ #0)");
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2 timed out after 0.5 s on pulse 3 (y+ #0) waiting for rank 5"),
              std::string::npos)
        << m;
  }
}

TEST(DeviceErrors, AReplayOnAnOldPlanSaysToCaptureAgain) {
  const detail::ErrorRecord record{3, -1, -1, -1, 0, 4, 6};
  try {
    detail::check_device_error(record, wording());
    FAIL() << "no exception";
  } catch (const HaloTimeoutError& e) {
    FAIL() << "not a time-out: " << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a CUDA graph captured on plan 4 was replayed after the exchange moved to "
                     "plan 6"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("Capture the exchange again"), std::string::npos) << m;
  }
}

TEST(DeviceErrors, NoRecordNoException) {
  EXPECT_NO_THROW(detail::check_device_error(detail::ErrorRecord{0, 0, 0, 0, 0, 0, 0}, wording()));
}

}  // namespace
