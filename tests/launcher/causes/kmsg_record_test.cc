// /dev/kmsg records as the kernel writes them (header, escapes, continuation lines), and the
// records a user process wrote, which are not evidence.
#include "launcher/causes/kmsg_record.h"

#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

TEST(KmsgRecordTest, HeaderFieldsAndTheMessage) {
  auto r = ParseKmsgRecord(
      "3,1002,7063247407,-;Memory cgroup out of memory: Killed process 63214 (uwsgi) "
      "total-vm:3149468kB\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->level, 3);
  EXPECT_EQ(r->seq, 1002u);
  EXPECT_EQ(r->timestamp_us, 7063247407);
  EXPECT_TRUE(r->from_kernel());
  EXPECT_EQ(r->text,
            "Memory cgroup out of memory: Killed process 63214 (uwsgi) total-vm:3149468kB");
}

TEST(KmsgRecordTest, ExtraHeaderFieldsAndContinuationLinesAreIgnored) {
  auto r = ParseKmsgRecord(
      "6,339,5140900,-,caller=T1;NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off "
      "the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->text, "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.");
}

TEST(KmsgRecordTest, EscapedBytesAreRestored) {
  auto r = ParseKmsgRecord("6,1,2,-;a\\x5cb\\x09c \\xZZ \\x4");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->text, "a\\b\tc \\xZZ \\x4");  // only complete, valid escapes are undone
}

TEST(KmsgRecordTest, AUserWrittenRecordIsNotTheKernels) {
  // Facility 1 (user): what `echo ... > /dev/kmsg` produces; the kernel refuses facility 0.
  auto r =
      ParseKmsgRecord("12,5001,1000300,-;Out of memory: Killed process 4242 (python) total-vm:1kB");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->facility, 1);
  EXPECT_FALSE(r->from_kernel());
}

TEST(KmsgRecordTest, MalformedRecordsAreRefused) {
  for (const char* bad : {"", "no header", "6,1,2;too few fields", "x,1,2,-;text",
                          "6,1,-5,-;negative time", "6,1,2,-"}) {
    EXPECT_FALSE(ParseKmsgRecord(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace ddprun::launcher
