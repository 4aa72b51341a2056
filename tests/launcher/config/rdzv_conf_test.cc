#include "launcher/config/rdzv_conf.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ParseRdzvConfTest, CloseTimeoutIsPassedOnOnlyWhenGiven) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({{"read_timeout", "7"}});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->close_timeout.has_value());  // the backend's own bound
  EXPECT_EQ(unset->read_timeout, std::chrono::milliseconds(7000));

  absl::StatusOr<RdzvConf> set = ParseRdzvConf({{"close_timeout", "0.5"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->close_timeout, std::chrono::milliseconds(500));
}

TEST(ParseRdzvConfTest, FailureLastCallIsUnsetUnlessGiven) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({{"last_call_timeout", "3"}});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->timeouts.failure_last_call_timeout.has_value());
  absl::StatusOr<RdzvConf> zero = ParseRdzvConf({{"failure_last_call_timeout", "0"}});
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->timeouts.failure_last_call_timeout, std::chrono::milliseconds(0));
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"failure_last_call_timeout", "later"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("failure_last_call_timeout"));
}

TEST(ParseRdzvConfTest, BadValuesNameTheKey) {
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"close_timeout", "soon"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("close_timeout"));
  EXPECT_THAT(bad.status().message(), HasSubstr("soon"));
}

// issue 43: as under torchrun, a key ddprun does not read is no error; it is listed for one
// warning that names it and the keys ddprun reads. A known key with a bad value still fails.
TEST(ParseRdzvConfTest, UnknownKeysAreListedForAWarningNotRefused) {
  absl::StatusOr<RdzvConf> c = ParseRdzvConf(
      {{"close_timout", "1"}, {"'join_timeout", "5"}, {"join_timeout", "7"}, {"foo", "1"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->timeouts.join_timeout, std::chrono::seconds(7));
  EXPECT_EQ(c->unknown_keys, (std::vector<std::string>{"'join_timeout", "close_timout", "foo"}));
  EXPECT_THAT(UnknownKeyWarning("close_timout", "1"),
              AllOf(HasSubstr("--rdzv-conf close_timout=1: unknown key, ignored"),
                    HasSubstr("close_timeout")));
  EXPECT_THAT(UnknownKeyWarning("'join_timeout", "5"), HasSubstr("quoted twice"));
  EXPECT_FALSE(ParseRdzvConf({{"foo", "1"}, {"join_timeout", "soon"}}).ok());
}

// torchrun's etcd backend names its TLS files cacert/cert/key, its etcd-v2 backend
// ca_cert/ssl_cert/ssl_cert_key: both are ddprun's tls_ca/tls_cert/tls_key.
TEST(ParseRdzvConfTest, TorchrunEtcdTlsKeysAreDdprunsTlsSettings) {
  absl::StatusOr<RdzvConf> v1 = ParseRdzvConf(
      {{"protocol", "https"}, {"cacert", "/c/ca.crt"}, {"cert", "/c/a.crt"}, {"key", "/c/a.key"}});
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->protocol, RdzvProtocol::kHttps);
  EXPECT_EQ(v1->tls_ca, "/c/ca.crt");
  EXPECT_EQ(v1->tls_cert, "/c/a.crt");
  EXPECT_EQ(v1->tls_key, "/c/a.key");

  absl::StatusOr<RdzvConf> v2 = ParseRdzvConf({{"protocol", " HTTPS "},
                                               {"ca_cert", "/c/ca.crt"},
                                               {"ssl_cert", "/c/a.crt"},
                                               {"ssl_cert_key", "/c/a.key"}});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->protocol, RdzvProtocol::kHttps);
  EXPECT_EQ(v2->tls_ca, "/c/ca.crt");
  EXPECT_EQ(v2->tls_cert, "/c/a.crt");
  EXPECT_EQ(v2->tls_key, "/c/a.key");

  // The same file under two names is one setting.
  absl::StatusOr<RdzvConf> both = ParseRdzvConf({{"cacert", "/c/ca.crt"}, {"tls_ca", "/c/ca.crt"}});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->tls_ca, "/c/ca.crt");
  EXPECT_EQ(both->protocol, RdzvProtocol::kUnset);

  absl::StatusOr<RdzvConf> plain = ParseRdzvConf({{"protocol", "http"}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->protocol, RdzvProtocol::kHttp);
}

TEST(ParseRdzvConfTest, ContradictoryTlsSettingsNameBothKeys) {
  absl::StatusOr<RdzvConf> two = ParseRdzvConf({{"cacert", "/a.crt"}, {"tls_ca", "/b.crt"}});
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(),
              HasSubstr("--rdzv-conf cacert=/a.crt and tls_ca=/b.crt: two values for one setting"));
  absl::StatusOr<RdzvConf> plaintext_with_ca =
      ParseRdzvConf({{"protocol", "http"}, {"ca_cert", "/a.crt"}});
  ASSERT_FALSE(plaintext_with_ca.ok());
  EXPECT_THAT(plaintext_with_ca.status().message(),
              HasSubstr("protocol=http and tls_ca=/a.crt: TLS files need protocol=https"));
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"protocol", "grpc"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("--rdzv-conf protocol=grpc: must be http or https"));
}

// torch 2.x's c10d key: a duration, checked, without effect.
// Unset, the setup decides (RendezvousSetupTest.LivenessIsOnByDefaultWhereThereIsANodeToLose).
TEST(ParseRdzvConfTest, LivenessIsUnsetUnlessGivenAndItsKeysAreRead) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->liveness.has_value());
  absl::StatusOr<RdzvConf> on = ParseRdzvConf({{"liveness", "on"},
                                               {"liveness_interval_ms", "50"},
                                               {"liveness_phi", "10.5"},
                                               {"liveness_pause_ms", "200"},
                                               {"liveness_min_sd_ms", "30"},
                                               {"liveness_max_rate", "250000"},
                                               {"liveness_observers", "1"}});
  ASSERT_TRUE(on.ok()) << on.status();
  const rendezvous::LivenessSettings& l = on->timeouts.liveness;
  EXPECT_EQ(on->liveness, std::optional<rendezvous::LivenessMode>(rendezvous::LivenessMode::kOn));
  absl::StatusOr<RdzvConf> automatic = ParseRdzvConf({{"liveness", "auto"}});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->liveness, rendezvous::LivenessMode::kAuto);
  EXPECT_EQ(l.interval, std::chrono::milliseconds(50));
  EXPECT_DOUBLE_EQ(l.phi, 10.5);
  EXPECT_EQ(l.pause, std::chrono::milliseconds(200));
  EXPECT_EQ(l.min_sd, std::chrono::milliseconds(30));
  EXPECT_EQ(l.observers, 1);
  EXPECT_EQ(l.max_rate, 250000);
  EXPECT_TRUE(on->unknown_keys.empty());
}

TEST(ParseRdzvConfTest, MtbfIsTheCheckpointAdvicesPriorInSeconds) {
  absl::StatusOr<RdzvConf> unset = ParseRdzvConf({});
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->timeouts.mtbf.has_value());
  absl::StatusOr<RdzvConf> day = ParseRdzvConf({{"mtbf", "86400"}});
  ASSERT_TRUE(day.ok()) << day.status();
  EXPECT_EQ(day->timeouts.mtbf, std::optional<Duration>(std::chrono::hours(24)));
  EXPECT_TRUE(day->unknown_keys.empty());
  for (const char* bad : {"abc", "0", "-5", "1e12"}) {
    absl::StatusOr<RdzvConf> refused = ParseRdzvConf({{"mtbf", bad}});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr(std::string("--rdzv-conf mtbf=") + bad));
  }
}

TEST(ParseRdzvConfTest, BadLivenessValuesNameTheKey) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"liveness", "yes-please"},
                                                        {"liveness_interval_ms", "0"},
                                                        {"liveness_interval_ms", "soon"},
                                                        {"liveness_phi", "0.5"},
                                                        {"liveness_phi", "nan"},
                                                        {"liveness_pause_ms", "-1"},
                                                        {"liveness_min_sd_ms", "0"},
                                                        {"liveness_max_rate", "99"},
                                                        {"liveness_max_rate", "fast"},
                                                        {"liveness_observers", "2"}}) {
    absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{key, value}});
    ASSERT_FALSE(bad.ok()) << key << "=" << value;
    EXPECT_THAT(bad.status().message(), HasSubstr("--rdzv-conf " + key + "=")) << value;
  }
}

TEST(ParseRdzvConfTest, HeartbeatTimeoutIsCheckedAndAccepted) {
  EXPECT_TRUE(ParseRdzvConf({{"heartbeat_timeout", "30"}}).ok());
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"heartbeat_timeout", "-1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("heartbeat_timeout"));
}

// A static job coordinates through node 0's rendezvous unless told not to; its port defaults
// to MASTER_PORT + 1 (left unset here, decided by the setup).
TEST(ParseRdzvConfTest, StaticCoordinationAndItsPort) {
  absl::StatusOr<RdzvConf> plain = ParseRdzvConf({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->static_coordination, StaticCoordination::kRendezvous);
  EXPECT_FALSE(plain->static_port.has_value());
  absl::StatusOr<RdzvConf> set =
      ParseRdzvConf({{"static_coordination", "none"}, {"static_port", "29555"}});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->static_coordination, StaticCoordination::kNone);
  EXPECT_EQ(set->static_port, 29555);
  absl::StatusOr<RdzvConf> bad = ParseRdzvConf({{"static_coordination", "yes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("static_coordination=yes: must be rendezvous or none"));
  for (const char* port : {"0", "65536", "x"}) {
    absl::StatusOr<RdzvConf> bad_port = ParseRdzvConf({{"static_port", port}});
    ASSERT_FALSE(bad_port.ok()) << port;
    EXPECT_THAT(bad_port.status().message(), HasSubstr("static_port")) << port;
  }
}

}  // namespace
}  // namespace ddprun::launcher
