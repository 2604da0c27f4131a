// The event log's export: Chrome trace JSON with one process per rank, one named thread per
// track, spans and instants, and each device event's exchange counter and exchange object
// (what scripts/trace-summary --kernels groups by); scripts/trace-summary's analysis of it is
// checked by tests/apps/check_trace_summary.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../../src/runtime/env.hpp"
#include "../../src/trace/device_trace.hpp"
#include "halox/trace.hpp"

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Trace, ChromeJsonCarriesTheExchangeOfDeviceEventsOnly) {
  const std::vector<halox::trace::Event> events = {
      {"launch forward", 0, "host", 1000, 3000},
      {"pack + store", 0, "gpu forward pulse 2 block 0", 4000, 5500, 7},
      {"signal sent", 0, "gpu forward pulse 2 block 0", 6000, 6000, 7},
      {"pack + store", 1, "gpu forward pulse 2 block 0", 4100, 5600, 8},
  };
  const std::string json = halox::trace::to_chrome_json(events);
  EXPECT_EQ(count(json, "\"args\": {\"exchange\": 7}"), 2) << json;
  EXPECT_EQ(count(json, "\"args\": {\"exchange\": 8}"), 1) << json;
  // The host span has no exchange; every event is one object, braces balanced.
  EXPECT_EQ(count(json, "\"exchange\""), 3) << json;
  EXPECT_EQ(count(json, "{"), count(json, "}")) << json;
  // Spans (X) and the instant (i), times from the earliest event, in us.
  EXPECT_EQ(count(json, "\"ph\": \"X\""), 3) << json;
  EXPECT_EQ(count(json, "\"ph\": \"i\""), 1) << json;
  EXPECT_NE(json.find("\"ts\": 3.000, \"dur\": 1.500"), std::string::npos) << json;
  // One named thread per (rank, track): host and the pulse's block on rank 0, one on rank 1.
  EXPECT_EQ(count(json, "\"thread_name\""), 3) << json;
  EXPECT_EQ(count(json, "\"process_name\""), 2) << json;
}

TEST(Trace, ChromeJsonNamesTheExchangeObjectEscaped) {
  const std::vector<halox::trace::Event> events = {
      {"unpack", 0, "gpu grid op 4 block 0", 1000, 2000, 3, "phi"},
      {"unpack", 0, "gpu grid op 4 block 0", 3000, 4000, 3, "f \"quoted\" \\ g"},
  };
  const std::string json = halox::trace::to_chrome_json(events);
  EXPECT_EQ(count(json, "\"args\": {\"exchange\": 3, \"object\": \"phi\"}"), 1) << json;
  EXPECT_EQ(count(json, "\"object\": \"f \\\"quoted\\\" \\\\ g\"}"), 1) << json;
}

// Which launch, hence which exchange object, a device record came from follows from its
// slot, which its ring index gives once the ring has wrapped.
TEST(Trace, RingIndexGivesTheSlotAfterTheRingWrapped) {
  using halox::detail::ring_slot;
  for (unsigned long long i = 0; i < 7; ++i) EXPECT_EQ(ring_slot(i, 7, 10), i);  // not wrapped
  // 25 slots handed out into 10 records: slots 15..24 are there, slot s at index s % 10.
  for (unsigned long long s = 15; s < 25; ++s) EXPECT_EQ(ring_slot(s % 10, 25, 10), s) << s;
  for (unsigned long long s = 10; s < 20; ++s) EXPECT_EQ(ring_slot(s % 10, 20, 10), s) << s;
}

}  // namespace

// Environment switches are parsed strictly: HALOX_TRACE=off once switched tracing on.
TEST(Trace, EnvironmentSwitchesTakeOnlyTheirWords) {
  ::setenv("HALOX_TEST_SWITCH", "off", 1);
  EXPECT_FALSE(halox::detail::env_flag("HALOX_TEST_SWITCH", true));
  ::setenv("HALOX_TEST_SWITCH", "ON", 1);
  EXPECT_TRUE(halox::detail::env_flag("HALOX_TEST_SWITCH", false));
  ::setenv("HALOX_TEST_SWITCH", "0", 1);
  EXPECT_FALSE(halox::detail::env_flag("HALOX_TEST_SWITCH", true));
  ::setenv("HALOX_TEST_SWITCH", "maybe", 1);
  EXPECT_THROW(halox::detail::env_flag("HALOX_TEST_SWITCH", false), halox::Error);
  ::unsetenv("HALOX_TEST_SWITCH");
  EXPECT_TRUE(halox::detail::env_flag("HALOX_TEST_SWITCH", true));
  ::setenv("HALOX_TEST_NUMBER", "12x", 1);
  EXPECT_THROW(halox::detail::env_int("HALOX_TEST_NUMBER", 1, 100, 5), halox::Error);
  ::setenv("HALOX_TEST_NUMBER", "99999999999999999999", 1);
  EXPECT_THROW(halox::detail::env_int("HALOX_TEST_NUMBER", 1, 100, 5), halox::Error);
  ::setenv("HALOX_TEST_NUMBER", "42", 1);
  EXPECT_EQ(halox::detail::env_int("HALOX_TEST_NUMBER", 1, 100, 5), 42);
  ::unsetenv("HALOX_TEST_NUMBER");
}

// The variables of others that halox reads are parsed as strictly: an MPS percentage that is
// not one stops the run rather than being read as "no limit".
TEST(Trace, OthersVariablesAreParsedStrictly) {
  const char* mps = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
  const char* saved = std::getenv(mps);
  const std::string kept = saved ? saved : "";
  ::unsetenv(mps);
  EXPECT_EQ(halox::detail::env_mps_thread_percentage(), 0.0);
  ::setenv(mps, "37.5", 1);
  EXPECT_EQ(halox::detail::env_mps_thread_percentage(), 37.5);
  for (const char* bad : {"abc", "50%", "0", "-5", "101", "nan"}) {
    ::setenv(mps, bad, 1);
    EXPECT_THROW(halox::detail::env_mps_thread_percentage(), halox::Error) << bad;
  }
  if (saved)
    ::setenv(mps, kept.c_str(), 1);
  else
    ::unsetenv(mps);
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const std::string kept_xdg = xdg ? xdg : "";
  ::setenv("XDG_CONFIG_HOME", "/x/config", 1);
  EXPECT_EQ(halox::detail::env_config_home(), "/x/config");
  ::setenv("XDG_CONFIG_HOME", "", 1);  // empty: as unset
  const char* home = std::getenv("HOME");
  EXPECT_EQ(halox::detail::env_config_home(), std::string(home && *home ? home : ".") + "/.config");
  if (xdg)
    ::setenv("XDG_CONFIG_HOME", kept_xdg.c_str(), 1);
  else
    ::unsetenv("XDG_CONFIG_HOME");
}

// A long traced run keeps its newest host events only: the log does not grow without bound.
TEST(Trace, HostEventLogIsBounded) {
  halox::trace::enable();
  halox::trace::clear();
  for (int i = 0; i < 300000; ++i) halox::trace::Scope scope("step", 0);
  const auto events = halox::trace::collect();
  EXPECT_LE(events.size(), std::size_t{1} << 16);
  EXPECT_GT(events.size(), std::size_t{1} << 15);
  halox::trace::clear();
}
