#include "launcher/config/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include "common/signal_names.h"
#include "launcher/config/flag_value.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class CliTest : public ::testing::Test {
 protected:
  CliTest() {
    script_ = dir_.File("train.py");
    testing::WriteFile(script_, "print('hi')\n");
    host_.cpu_count = 8;
    host_.gpu_count = 0;
    host_.hostname = "node0";
    env_["PATH"] = "/usr/bin:/bin";
  }

  absl::StatusOr<LaunchOptions> Parse(std::vector<std::string> args) {
    auto r = ParseCommandLine(args, env_, host_);
    if (!r.ok()) return r.status();
    return r->options;
  }

  std::string Error(std::vector<std::string> args) {
    auto r = ParseCommandLine(args, env_, host_);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  }

  testing::TempDir dir_;
  std::string script_;
  Environment env_;
  HostInfo host_;
};

TEST_F(CliTest, LaunchStyleFlags) {
  auto o = Parse({"--use_env", "--local_rank_arg=local_rank", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->use_env);
  EXPECT_EQ(o->local_rank_arg, "local_rank");
  env_["PET_LOCAL_RANK_ARG"] = "local-rank";
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->local_rank_arg, "local-rank");
  EXPECT_EQ(Error({"--local-rank-arg=rank", script_}),
            "--local-rank-arg=rank: expected local_rank (--local_rank=N) or local-rank "
            "(--local-rank=N)");
}

// The flags of this version, each from the command line, its PET_ variable and a YAML key.
TEST_F(CliTest, NumaBindingEventLogHandlerAndWorkerTtyFromEverySource) {
  auto o = Parse(
      {"--numa-binding=exclusive", "--event_log_handler=console", "--no-worker-tty", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->numa_binding, NumaMode::kExclusive);
  EXPECT_EQ(o->event_log_handler, "console");
  EXPECT_FALSE(o->worker_tty);
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->numa_binding.has_value()) << "off by default";
  EXPECT_EQ(o->event_log_handler, "null");
  EXPECT_TRUE(o->worker_tty);

  env_["PET_NUMA_BINDING"] = "core-complex";
  env_["PET_EVENT_LOG_HANDLER"] = "console";
  env_["PET_NO_WORKER_TTY"] = "1";
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->numa_binding, NumaMode::kCoreComplex);
  EXPECT_EQ(o->event_log_handler, "console");
  EXPECT_FALSE(o->worker_tty);
  env_.erase("PET_NUMA_BINDING");
  env_.erase("PET_EVENT_LOG_HANDLER");
  env_.erase("PET_NO_WORKER_TTY");

  const std::string yaml = dir_.File("job.yaml");
  testing::WriteFile(yaml, "numa_binding: socket\nevent-log-handler: console\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->numa_binding, NumaMode::kSocket);
  EXPECT_EQ(o->event_log_handler, "console");

  EXPECT_EQ(Error({"--numa-binding=numa", script_}),
            "--numa-binding=numa: must be node, socket, exclusive or core-complex");
  env_["PET_EVENT_LOG_HANDLER"] = "file";
  EXPECT_EQ(Error({script_}), "PET_EVENT_LOG_HANDLER=file: must be null or console");
}

TEST_F(CliTest, PreloadFromEverySourceAndItsErrors) {
  auto o = Parse({"--preload=torch, numpy ,torch.distributed", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload, (std::vector<std::string>{"torch", "numpy", "torch.distributed"}));
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->preload.empty()) << "off by default";
  o = Parse({"-m", "pkg.train", "--preload=torch"});  // after the module: the module's own
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->preload.empty());
  o = Parse({"--preload=torch", "-m", "pkg.train"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload, std::vector<std::string>{"torch"});

  env_["PET_PRELOAD"] = "transformers";
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload, std::vector<std::string>{"transformers"});
  env_.erase("PET_PRELOAD");
  const std::string yaml = dir_.File("job.yaml");
  testing::WriteFile(yaml, "preload: [torch, numpy]\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload, (std::vector<std::string>{"torch", "numpy"}));

  EXPECT_EQ(Error({"--preload=torch,9lives", script_}),
            "--preload=torch,9lives: '9lives' is not a Python module name");
  EXPECT_EQ(Error({"--preload=torch.", script_}),
            "--preload=torch.: 'torch.' is not a Python module name");
  EXPECT_EQ(Error({"--preload=torch", "--no-python", "/bin/true"}),
            "--preload=torch: a --no-python program is not preloaded with Python modules; "
            "--preload=native if it takes ddprun's hand-over itself (ddp-train does; "
            "docs/guide/warm-restarts.md)");
  env_["PET_PRELOAD"] = "torch";
  EXPECT_EQ(Error({"--no-python", "/bin/true"}),
            "PET_PRELOAD=torch: a --no-python program is not preloaded with Python modules; "
            "--preload=native if it takes ddprun's hand-over itself (ddp-train does; "
            "docs/guide/warm-restarts.md)");
  env_.erase("PET_PRELOAD");
}

TEST_F(CliTest, PreloadNativeIsForNoPythonProgramsOnly) {
  auto o = Parse({"--preload=native", "--no-python", "/bin/true"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload_kind, PreloadKind::kNative);
  EXPECT_TRUE(o->preload.empty());
  o = Parse({"--preload=torch", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload_kind, PreloadKind::kPython);
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload_kind, PreloadKind::kOff);
  // For a Python worker every name is a module's, "native" too.
  o = Parse({"--preload=native", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->preload_kind, PreloadKind::kPython);
  EXPECT_EQ(o->preload, std::vector<std::string>{"native"});
  EXPECT_EQ(Error({"--preload=native,torch", "--no-python", "/bin/true"}),
            "--preload=native,torch: a --no-python program is not preloaded with Python "
            "modules; --preload=native if it takes ddprun's hand-over itself (ddp-train does; "
            "docs/guide/warm-restarts.md)");
}

TEST_F(CliTest, ShutdownTimeoutIsStopTimeoutAndItsVariableTheWeakestSource) {
  env_["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "4";
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stop_timeout, std::chrono::milliseconds(4000));
  o = Parse({"--shutdown-timeout=2.5", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stop_timeout, std::chrono::milliseconds(2500));
  o = Parse({"--stop_timeout=7", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stop_timeout, std::chrono::milliseconds(7000));
  env_["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "soon";
  EXPECT_THAT(Error({script_}), HasSubstr("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon"));
}

// Invoked as ddprun-launch: launch's --local-rank=N unless --use-env or the user says otherwise.
TEST_F(CliTest, LaunchDefaultsPassTheLocalRankAsAnArgument) {
  env_ = WithLaunchDefaults(env_);
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->local_rank_arg, "local-rank");
  o = Parse({"--local-rank-arg=local_rank", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->local_rank_arg, "local_rank");
  env_["PET_LOCAL_RANK_ARG"] = "local_rank";
  EXPECT_EQ(WithLaunchDefaults(env_).at("PET_LOCAL_RANK_ARG"), "local_rank");
}

// torch 2.x flags ddprun cannot honour are refused naming the flag and why, not ignored.
TEST_F(CliTest, Torch2FlagsWithoutAMeaningHereAreRefusedWithTheReason) {
  // issue 43: torch 2.x registers its own layout as `default`, and wrappers pass it.
  EXPECT_TRUE(Parse({"--logs-specs=default", script_}).ok());
  EXPECT_TRUE(Parse({"--logs_specs", "default", script_}).ok());
  EXPECT_THAT(Error({"--logs-specs=my_specs", script_}),
              AllOf(HasSubstr("--logs-specs=my_specs"), HasSubstr("ddprun does not load")));
  EXPECT_THAT(Error({"--logs_specs", "my_specs", script_}), HasSubstr("Python code"));
  env_["PET_LOGS_SPECS"] = "my_specs";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_LOGS_SPECS=my_specs"));
  env_.erase("PET_LOGS_SPECS");
  EXPECT_THAT(Error({"--nproc-per-node=xpu", script_}),
              AllOf(HasSubstr("--nproc-per-node=xpu"), HasSubstr("NVIDIA GPUs only")));
}

TEST_F(CliTest, VirtualLocalRankTakesOneVisibleGpuPerWorker) {
  auto o = Parse({"--virtual-local-rank", "--nproc-per-node=3", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->virtual_gpus, (std::vector<std::string>{"0", "1", "2"}));
  env_["CUDA_VISIBLE_DEVICES"] = "4,6,7";
  o = Parse({"--virtual-local-rank", "--nproc-per-node=2", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->virtual_gpus, (std::vector<std::string>{"4", "6", "7"}));
  EXPECT_EQ(Error({"--virtual-local-rank", "--nproc-per-node=4", script_}),
            "--virtual-local-rank: CUDA_VISIBLE_DEVICES=4,6,7 lists 3 GPU(s) for 4 workers "
            "(--nproc-per-node); each worker needs one of its own");
  o = Parse({"--signals-to-handle=SIGTERM,SIGUSR1", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->signals_to_handle, "SIGTERM,SIGUSR1");
}

TEST_F(CliTest, LogLinePrefixTemplateKnowsFourMacros) {
  auto o = Parse(
      {"--log-line-prefix-template=[${hostname} $rank ${local_rank} ${role_name}]$$", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->log_line_prefix_template, "[${hostname} $rank ${local_rank} ${role_name}]$$");
  env_["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "${rank}| ";
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->log_line_prefix_template, "${rank}| ");
  EXPECT_EQ(Error({"--log-line-prefix-template=[${node}]", script_}),
            "--log-line-prefix-template=[${node}]: unknown macro ${node} (known: ${role_name}, "
            "${rank}, ${local_rank}, ${hostname})");
  env_["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "$host ";
  EXPECT_THAT(Error({script_}), HasSubstr("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=$host : unknown"));
}

TEST_F(CliTest, DefaultsMatchTorchrun) {
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->min_nodes, 1);
  EXPECT_EQ(o->max_nodes, 1);
  EXPECT_EQ(o->nproc_per_node, 1);
  EXPECT_EQ(RdzvBackendName(o->rdzv_backend), "static");
  EXPECT_EQ(o->rdzv_id, "none");
  EXPECT_EQ(o->master_addr, "127.0.0.1");
  EXPECT_EQ(o->master_port, 29500);
  EXPECT_EQ(o->max_restarts, 0);
  EXPECT_EQ(o->role, "default");
  EXPECT_EQ(o->node_rank, 0);
  EXPECT_EQ(o->entrypoint_kind, EntrypointKind::kPythonScript);
}

TEST_F(CliTest, RdzvBackendKeepsTheNameGivenAndReadsEtcdV2AsEtcd) {
  for (const auto& [flag, name] :
       {std::pair{"--rdzv-backend=C10D", "c10d"}, std::pair{"--rdzv-backend=etcd", "etcd"},
        std::pair{"--rdzv-backend=etcd-v2", "etcd"}, std::pair{"--rdzv-backend=Etcd-V3", "etcd-v3"},
        std::pair{"--rdzv-backend=static", "static"}}) {
    auto o = Parse({flag, script_});
    ASSERT_TRUE(o.ok()) << flag << ": " << o.status();
    EXPECT_EQ(RdzvBackendName(o->rdzv_backend), name) << flag;
  }
  EXPECT_TRUE(IsEtcd(*ParseRdzvBackend("etcd-v3")));
  EXPECT_FALSE(IsEtcd(RdzvBackend::kC10d));
  EXPECT_EQ(Error({"--rdzv-backend=zookeeper", script_}),
            "--rdzv-backend=zookeeper: must be static, c10d, etcd or etcd-v3");
}

TEST_F(CliTest, BothSpellingsAndEqualsOrSpace) {
  auto a = Parse({"--nproc-per-node=3", "--max_restarts", "4", "--rdzv_backend=c10d",
                  "--rdzv-endpoint", "host:29400", "--nnodes=1:4", "--rdzv_id=job7", script_});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->nproc_per_node, 3);
  EXPECT_EQ(a->max_restarts, 4);
  EXPECT_EQ(RdzvBackendName(a->rdzv_backend), "c10d");
  EXPECT_EQ(a->rdzv_endpoint, "host:29400");
  EXPECT_EQ(a->min_nodes, 1);
  EXPECT_EQ(a->max_nodes, 4);
  EXPECT_EQ(a->rdzv_id, "job7");
  auto b = Parse({"--nproc_per_node", "3", script_});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->nproc_per_node, 3);
}

TEST_F(CliTest, ScriptArgumentsPassUntouched) {
  auto o = Parse({"--nproc-per-node=2", script_, "--nproc-per-node=5", "--lr", "3", "-m", "x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, 2);
  EXPECT_EQ(o->entrypoint, script_);
  EXPECT_THAT(o->entrypoint_args, ElementsAre("--nproc-per-node=5", "--lr", "3", "-m", "x"));
}

TEST_F(CliTest, ModuleAndNoPython) {
  auto m = Parse({"-m", "my.pkg.train", "--epochs", "2"});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->entrypoint_kind, EntrypointKind::kPythonModule);
  EXPECT_EQ(m->entrypoint, "my.pkg.train");
  EXPECT_THAT(m->entrypoint_args, ElementsAre("--epochs", "2"));
  auto n = Parse({"--no-python", "true", "x"});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->entrypoint_kind, EntrypointKind::kBinary);
  EXPECT_THAT(Error({"--no-python", "-m", "x"}), HasSubstr("cannot be used together"));
}

// issue 43: as torchrun's argparse, an unambiguous prefix of a long flag is that flag; an
// ambiguous one names the candidates. torchrun's flags are matched first, then ddprun's own.
TEST_F(CliTest, AbbreviatedFlagsAreTakenAsArgparseTakesThem) {
  auto o = Parse(
      {"--nproc_per=3", "--redirect=3", "--nnode", "1", "--max-r", "2", script_, "--nproc=9"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, 3);
  EXPECT_EQ(o->redirects.For(0), 3);
  EXPECT_EQ(o->max_restarts, 2);
  EXPECT_EQ(o->entrypoint_args, std::vector<std::string>{"--nproc=9"});  // the script's own
  EXPECT_EQ(Error({"--nproc=2", script_}),
            "ambiguous flag --nproc: it could be --nproc-per-node, --nproc_per_node (see --help)");
  EXPECT_THAT(Error({"--rdzv=x", script_}),
              AllOf(HasSubstr("ambiguous flag --rdzv"), HasSubstr("--rdzv-backend"),
                    HasSubstr("--rdzv_id")));
  // ddprun's own flags: a prefix no torchrun flag has.
  o = Parse({"--hang-t=5", "--crash-l=retry", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hang_timeout, std::chrono::seconds(5));
  EXPECT_EQ(o->crash_loop, CrashLoop::kRetry);
  EXPECT_THAT(Error({"--crash=retry", script_}),  // two spellings of one flag, as argparse
              HasSubstr("ambiguous flag --crash: it could be --crash-loop, --crash_loop"));
  // A value that looks like a flag is the flag's value, not another flag.
  o = Parse({"--role", "--nproc", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->role, "--nproc");
}

TEST_F(CliTest, NprocPerNodeKinds) {
  EXPECT_EQ(Parse({"--nproc-per-node=cpu", script_})->nproc_per_node, 8);
  EXPECT_EQ(Parse({"--nproc-per-node=auto", script_})->nproc_per_node, 8);
  EXPECT_THAT(Error({"--nproc-per-node=gpu", script_}), HasSubstr("no GPU"));
  host_.gpu_count = 4;
  EXPECT_EQ(Parse({"--nproc-per-node=gpu", script_})->nproc_per_node, 4);
  EXPECT_EQ(Parse({"--nproc-per-node=auto", script_})->nproc_per_node, 4);
}

TEST_F(CliTest, BadInputNamesTheFlagAndValue) {
  EXPECT_EQ(Error({"--nnodes=3:2", script_}), "--nnodes=3:2: MIN (3) is greater than MAX (2)");
  EXPECT_THAT(Error({"--nnodes=abc", script_}), HasSubstr("--nnodes=abc"));
  EXPECT_THAT(Error({"--nnodes=0", script_}), HasSubstr("--nnodes=0"));
  EXPECT_THAT(Error({"--nproc-per-node=0", script_}), HasSubstr("--nproc-per-node=0"));
  EXPECT_THAT(Error({"--nproc-per-node=-2", script_}), HasSubstr("--nproc-per-node=-2"));
  EXPECT_THAT(Error({"--nproc-per-node=lots", script_}), HasSubstr("--nproc-per-node=lots"));
  EXPECT_THAT(Error({"--frobnicate=1", script_}), HasSubstr("unknown flag --frobnicate"));
  // issue 43: an --rdzv-conf key ddprun does not read is a warning, not an error.
  auto conf =
      ParseCommandLine({"--rdzv-conf=use_libuv=1,foo=1,read_timeout=5", script_}, env_, host_);
  ASSERT_TRUE(conf.ok()) << conf.status();
  ASSERT_EQ(conf->warnings.size(), 1u);
  EXPECT_THAT(conf->warnings[0], HasSubstr("--rdzv-conf foo=1: unknown key, ignored"));
  EXPECT_THAT(Error({"--rdzv-conf=foo=1,read_timeout=never", script_}), HasSubstr("read_timeout"));
  EXPECT_THAT(Error({"--master-port=0", script_}), HasSubstr("--master-port=0"));
  EXPECT_THAT(Error({"--master-port=70000", script_}), HasSubstr("1..65535"));
  EXPECT_THAT(Error({"--rdzv-endpoint=host:99999", script_}), HasSubstr("1..65535"));
  EXPECT_THAT(Error({"--max-restarts=-1", script_}), HasSubstr("--max-restarts=-1"));
  EXPECT_THAT(Error({"--rdzv-backend=zookeeper", script_}), HasSubstr("zookeeper"));
  EXPECT_THAT(Error({"--tee=7", script_}), HasSubstr("--tee=7"));
  EXPECT_THAT(Error({"--signals-to-handle=SIGNOPE", script_}), HasSubstr("SIGNOPE"));
  EXPECT_THAT(Error({dir_.File("missing.py")}), HasSubstr("missing.py: no such file"));
  EXPECT_THAT(Error({"--no-python", "definitely-not-a-program-xyz"}),
              HasSubstr("definitely-not-a-program-xyz: not found in PATH"));
  const std::string not_exec = dir_.File("data.txt");
  testing::WriteFile(not_exec, "x", 0644);
  EXPECT_THAT(Error({"--no-python", not_exec}), HasSubstr("not executable"));
  EXPECT_THAT(Error({}), HasSubstr("missing the training script"));
  EXPECT_THAT(Error({"--standalone", "--nnodes=2", script_}), HasSubstr("--standalone"));
  EXPECT_THAT(Error({"--nnodes=1:2", script_}), HasSubstr("static rendezvous"));
  EXPECT_THAT(Error({"--nnodes=2", "--node-rank=2", script_}), HasSubstr("--node-rank=2"));
}

TEST_F(CliTest, PetEnvironmentDefaultsAreOverriddenByFlags) {
  env_["PET_NPROC_PER_NODE"] = "6";
  env_["PET_MAX_RESTARTS"] = "2";
  auto o = Parse({"--max-restarts=5", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, 6);
  EXPECT_EQ(o->max_restarts, 5);
  env_["PET_NNODES"] = "x";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_NNODES=x"));
}

TEST_F(CliTest, YamlConfigWithCommandLineWinning) {
  const std::string cfg = dir_.File("job.yaml");
  testing::WriteFile(cfg,
                     "nproc-per-node: 4\n"
                     "max_restarts: 3\n"
                     "rdzv-conf: {join_timeout: 60, is_host: true}\n"
                     "local-ranks-filter: [0, 2]\n"
                     "tee: 3\n"
                     "script: " +
                         script_ +
                         "\n"
                         "script-args: [--epochs, \"2\"]\n");
  auto o = Parse({"--config", cfg, "--max-restarts=1"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node, 4);
  EXPECT_EQ(o->max_restarts, 1);
  EXPECT_EQ(o->rdzv.timeouts.join_timeout, std::chrono::seconds(60));  // parsed once
  EXPECT_EQ(o->rdzv.is_host, true);
  EXPECT_THAT(o->local_ranks_filter, ElementsAre(0, 2));
  EXPECT_EQ(o->tee.all, 3);
  EXPECT_EQ(o->entrypoint, script_);
  EXPECT_THAT(o->entrypoint_args, ElementsAre("--epochs", "2"));
}

TEST_F(CliTest, YamlErrorsNameFileAndLine) {
  const std::string cfg = dir_.File("bad.yaml");
  testing::WriteFile(cfg, "nnodes: 1\nnproc-per-node: [1, 2\n");
  EXPECT_THAT(Error({"--config", cfg, script_}), HasSubstr(cfg + ":"));
  testing::WriteFile(cfg, "nnodes: 1\n\nnprocs: 2\n");
  EXPECT_EQ(Error({"--config", cfg, script_}), cfg + ":3: unknown key 'nprocs'");
  testing::WriteFile(cfg, "nnodes: 5:2\n");
  EXPECT_THAT(Error({"--config", cfg, script_}), HasSubstr(cfg + ":1: nnodes=5:2"));
  EXPECT_THAT(Error({"--config", dir_.File("none.yaml"), script_}), HasSubstr("none.yaml"));
  // issue 43: a script is one path and its arguments a list; a mapping or a list there was
  // flattened into "a=1" or "a,b".
  testing::WriteFile(cfg, "nnodes: 1\nscript-args: {a: 1}\n");
  EXPECT_EQ(Error({"--config", cfg, script_}),
            cfg + ":2: script-args: expected a list of arguments, not a mapping");
  testing::WriteFile(cfg, "script: [a, b]\n");
  EXPECT_THAT(Error({"--config", cfg}),
              HasSubstr(cfg + ":1: script: expected one script or program, not a list"));
}

// issue 43: an address no host has ("[::1" waited for ever on a store nobody serves) is a
// usage error at once.
TEST_F(CliTest, MasterAddrMustBeAHost) {
  EXPECT_EQ(Error({"--master-addr=[::1", script_}), "--master-addr=[::1: missing ']'");
  EXPECT_THAT(Error({"--master-addr=node1:29500", script_}),
              HasSubstr("expected a host without a port"));
  EXPECT_THAT(Error({"--master-addr=a b", script_}), HasSubstr("--master-addr=a b"));
  for (const std::string ok : {"node-1.cluster", "10.0.0.1", "::1", "[::1]", "localhost"}) {
    auto o = Parse({"--master-addr=" + ok, script_});
    ASSERT_TRUE(o.ok()) << ok << ": " << o.status();
    EXPECT_EQ(o->master_addr, ok);
  }
}

// Issue 28 #7: "--master-addr=" took the next argument ("--no-python") as its value, and
// "--log-dir=" made a folder of that name. An empty value is the flag's own empty value: an
// error where the flag needs one, torchrun's default where an empty value means it (argparse
// gives '' for --x=, and torchrun treats an empty --log-dir, --rdzv-endpoint, ... as unset).
TEST_F(CliTest, EmptyValueNeverTakesTheNextArgument) {
  EXPECT_EQ(Error({"--master-addr=", "--no-python", "/bin/echo", "hi"}),
            "--master-addr=: must not be empty");
  EXPECT_EQ(Error({"--master_addr=", "--no-python", "/bin/echo"}),
            "--master-addr=: must not be empty");
  EXPECT_THAT(Error({"--nnodes=", "--no-python", "/bin/echo"}), HasSubstr("--nnodes="));
  EXPECT_THAT(Error({"--rdzv-id=", "--no-python", "/bin/echo"}), HasSubstr("--rdzv-id="));
  EXPECT_THAT(Error({"--config=", "--no-python", "/bin/echo"}),
              HasSubstr("--config=: names no file"));
  auto o = Parse({"--log-dir=", "--no-python", "/bin/echo", "hi"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->log_dir, "");
  EXPECT_EQ(o->entrypoint_kind, EntrypointKind::kBinary);
  EXPECT_EQ(o->entrypoint, "/bin/echo");
  EXPECT_THAT(o->entrypoint_args, ElementsAre("hi"));
  o = Parse({"--rdzv-endpoint=", "--local-addr=", "--rdzv_conf=", script_, "--x="});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rdzv_endpoint, "");
  EXPECT_EQ(o->entrypoint, script_);
  EXPECT_THAT(o->entrypoint_args, ElementsAre("--x="));  // the script's own, untouched
  // The space form gives the same empty value.
  EXPECT_EQ(Error({"--master-addr", "", script_}), "--master-addr=: must not be empty");
}

// Issue 23: --restart-mode and --reform-timeout from every source, and bad values named.
TEST_F(CliTest, RestartModeAndReformTimeoutFromEverySource) {
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->restart_mode, RestartMode::kCold) << "torchrun's model by default";
  EXPECT_EQ(o->reform_timeout, std::chrono::seconds(60));
  o = Parse({"--restart-mode=in-process", "--reform-timeout=2.5", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->restart_mode, RestartMode::kInProcess);
  EXPECT_EQ(o->reform_timeout, std::chrono::milliseconds(2500));
  env_["PET_RESTART_MODE"] = "in-process";
  o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->restart_mode, RestartMode::kInProcess);
  o = Parse({"--restart-mode=cold", script_});  // the command line wins
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->restart_mode, RestartMode::kCold);
  env_.erase("PET_RESTART_MODE");
  const std::string yaml = dir_.File("job.yaml");
  testing::WriteFile(yaml, "restart-mode: in-process\nreform_timeout: 30\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->restart_mode, RestartMode::kInProcess);
  EXPECT_EQ(o->reform_timeout, std::chrono::seconds(30));

  EXPECT_THAT(Error({"--restart-mode=warm", script_}), HasSubstr("--restart-mode=warm"));
  EXPECT_THAT(Error({"--reform-timeout=0", script_}), HasSubstr("--reform-timeout=0"));
  EXPECT_THAT(Error({"--reform-timeout=inf", script_}), HasSubstr("--reform-timeout=inf"));
  env_["PET_RESTART_MODE"] = "hot";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_RESTART_MODE=hot"));
}

// Issue 25 item 2: --crash-loop from the command line and YAML; stop by default.
TEST_F(CliTest, CrashLoopIsStopByDefaultAndRetryWhenAsked) {
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->crash_loop, CrashLoop::kStop);
  o = Parse({"--crash-loop=retry", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->crash_loop, CrashLoop::kRetry);
  const std::string yaml = dir_.File("job.yaml");
  testing::WriteFile(yaml, "crash-loop: retry\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->crash_loop, CrashLoop::kRetry);
  const std::string error = Error({"--crash-loop=never", script_});
  EXPECT_THAT(error, HasSubstr("--crash-loop=never"));
  EXPECT_THAT(error, HasSubstr("stop or retry"));
}

TEST_F(CliTest, HealthCheckTakesACommandAndATimeout) {
  auto o = Parse({script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->health_check, "");
  EXPECT_EQ(o->health_check_timeout, std::chrono::seconds(60));
  o = Parse({"--health-check=nvidia-smi -q > /dev/null && test -d /data",
             "--health-check-timeout=2.5", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->health_check, "nvidia-smi -q > /dev/null && test -d /data");
  EXPECT_EQ(o->health_check_timeout, std::chrono::milliseconds(2500));
  const std::string yaml = dir_.File("job.yaml");
  testing::WriteFile(yaml, "health-check: /opt/site/gpu-ok --quick\nhealth-check-timeout: 30\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->health_check, "/opt/site/gpu-ok --quick");
  EXPECT_EQ(o->health_check_timeout, std::chrono::seconds(30));
  EXPECT_THAT(Error({"--health-check= ", script_}),
              HasSubstr("--health-check= : an empty command"));
  EXPECT_THAT(Error({"--health-check-timeout=0", script_}),
              HasSubstr("--health-check-timeout=0: must be a positive number of seconds"));
  EXPECT_THAT(Error({"--health-check-timeout=soon", script_}),
              HasSubstr("--health-check-timeout=soon"));
}

// The start's own hang allowance: flag, YAML and PET_ variable; only beside --hang-timeout.
TEST_F(CliTest, HangStartupTimeout) {
  auto o = Parse({"--hang-timeout=30", "--hang-startup-timeout=600", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hang_timeout, std::chrono::seconds(30));
  EXPECT_EQ(o->hang_startup_timeout, std::chrono::seconds(600));
  const std::string yaml = dir_.File("hang.yaml");
  testing::WriteFile(yaml, "hang-timeout: 20\nhang-startup-timeout: 90.5\n");
  o = Parse({"--config=" + yaml, script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hang_startup_timeout, std::chrono::milliseconds(90500));
  EXPECT_THAT(Error({"--hang-startup-timeout=60", script_}),
              HasSubstr("--hang-startup-timeout=60: only with --hang-timeout"));
  EXPECT_THAT(Error({"--hang-timeout=5", "--hang-startup-timeout=0", script_}),
              HasSubstr("--hang-startup-timeout=0: must be a positive number of seconds"));
  env_["PET_HANG_STARTUP_TIMEOUT"] = "45";
  o = Parse({"--hang-timeout=5", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hang_startup_timeout, std::chrono::seconds(45));
  env_.erase("PET_HANG_STARTUP_TIMEOUT");
}

// Issue 28 #10: durations that overflowed (1e19 s: no grace at all) or are not numbers.
TEST_F(CliTest, DurationsAreFiniteAndBounded) {
  EXPECT_THAT(Error({"--stop-timeout=1e19", script_}), HasSubstr("--stop-timeout=1e19"));
  EXPECT_THAT(Error({"--shutdown-timeout=9.3e9", script_}), HasSubstr("--shutdown-timeout=9.3e9"));
  EXPECT_THAT(Error({"--hang-timeout=inf", script_}), HasSubstr("--hang-timeout=inf"));
  EXPECT_THAT(Error({"--monitor-interval=nan", script_}), HasSubstr("--monitor-interval=nan"));
  env_["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "1e300";
  EXPECT_THAT(Error({script_}), HasSubstr("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1e300"));
  env_.erase("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  env_["TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"] = "1e19";
  EXPECT_THAT(Error({script_}), HasSubstr("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=1e19"));
  env_.erase("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT");
  auto o = Parse({"--stop-timeout=3600", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stop_timeout, std::chrono::hours(1));
}

// Issue 28 #9 and #8: the run id names a folder under --log-dir; it must stay one folder
// there ("../../x" escaped it) and fit a file name (10 KB threw filesystem_error).
TEST_F(CliTest, RunIdIsOneFolderName) {
  for (const std::string& bad : std::vector<std::string>{"../../../tmp/x/pwned", "a/b", "/abs",
                                                         "..", ".", "a\nb", "a\001b", "\x7f"}) {
    EXPECT_THAT(Error({"--rdzv-id=" + bad, "--log-dir=" + dir_.File("logs"), script_}),
                HasSubstr("--rdzv-id="))
        << bad;
  }
  env_["PET_RDZV_ID"] = "../up";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_RDZV_ID=../up"));
  env_.erase("PET_RDZV_ID");
  const std::string huge(10000, 'a');
  const std::string message = Error({"--rdzv-id=" + huge, "--log-dir=" + dir_.File("l"), script_});
  EXPECT_THAT(message, HasSubstr("--rdzv-id="));
  EXPECT_THAT(message, HasSubstr("at most 256 bytes"));
  EXPECT_LT(message.size(), 300u);  // the value is shortened in the message
  // 250 bytes are a valid rendezvous id, but too long to be a folder with its "-N" suffix.
  const std::string long_id(250, 'b');
  EXPECT_TRUE(Parse({"--rdzv-id=" + long_id, script_}).ok());
  EXPECT_THAT(Error({"--rdzv-id=" + long_id, "--log-dir=" + dir_.File("l"), script_}),
              HasSubstr("--log-dir"));
  auto o = Parse({"--rdzv-id=job-42.a_b ..x", "--log-dir=" + dir_.File("l"), script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rdzv_id, "job-42.a_b ..x");
  EXPECT_THAT(Error({"--log-dir=" + std::string(4000, 'd'), script_}), HasSubstr("--log-dir="));
}

// Issue 28 #16: host[:port] entries (a c10d list names the job's hosts, an etcd list its members;
// every entry is checked).
TEST_F(CliTest, RdzvEndpointIsHostAndPort) {
  for (const auto& [bad, named] :
       std::vector<std::pair<std::string, std::string>>{{"127.0.0.1:1:2", "127.0.0.1:1:2"},
                                                        {"http://host:29400", "http://host:29400"},
                                                        {"a:1,http://b:2", "http://b:2"}}) {
    EXPECT_THAT(Error({"--rdzv-backend=c10d", "--nnodes=1:2", "--rdzv-endpoint=" + bad, script_}),
                HasSubstr("--rdzv-endpoint=" + named))
        << bad;
  }
  EXPECT_THAT(Error({"--rdzv-backend=etcd-v3", "--rdzv-endpoint=a:1,http://b:2", script_}),
              HasSubstr("--rdzv-endpoint="));
  auto o = Parse({"--rdzv-backend=etcd-v3", "--rdzv-endpoint=a:1,b:2,[::1]:3", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  o = Parse({"--rdzv-backend=c10d", "--rdzv-endpoint=[::1]:29400", script_});
  ASSERT_TRUE(o.ok()) << o.status();
}

// Issue 28 #17: what the rendezvous refused late (exit 3, unnamed) is refused at parse time.
TEST_F(CliTest, LengthsAndRangesCheckedAtParseTime) {
  const std::vector<std::string> c10d = {"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1"};
  auto error = [&](const std::string& flag) {
    std::vector<std::string> args = c10d;
    args.push_back(flag);
    args.push_back(script_);
    return Error(args);
  };
  EXPECT_THAT(error("--rdzv-conf=keep_alive_interval=1e300"),
              HasSubstr("--rdzv-conf keep_alive_interval=1e300"));
  EXPECT_THAT(error("--rdzv-conf=keep_alive_interval=0"),
              HasSubstr("--rdzv-conf keep_alive_interval=0"));
  EXPECT_THAT(error("--rdzv-conf=join_timeout=nan"), HasSubstr("--rdzv-conf join_timeout=nan"));
  EXPECT_THAT(error("--rdzv-conf=keep_alive_max_attempt=0"),
              HasSubstr("--rdzv-conf keep_alive_max_attempt=0"));
  EXPECT_THAT(error("--rdzv-conf=http_port=70000"), HasSubstr("--rdzv-conf http_port=70000"));
  EXPECT_THAT(error("--rdzv-conf=is_host=maybe"), HasSubstr("--rdzv-conf is_host=maybe"));
  // The lease (interval x attempts) must be a representable time too.
  EXPECT_THAT(error("--rdzv-conf=keep_alive_interval=86400,keep_alive_max_attempt=1000"),
              HasSubstr("keep_alive_max_attempt"));
  EXPECT_THAT(error("--local-addr=" + std::string(1000, 'h')), HasSubstr("--local-addr="));
  EXPECT_THAT(error("--local-addr=a b"), HasSubstr("--local-addr="));
  const std::string id_message = error("--rdzv-id=" + std::string(300, 'i'));
  EXPECT_THAT(id_message, HasSubstr("--rdzv-id="));
  EXPECT_THAT(id_message, HasSubstr("256"));
  EXPECT_TRUE(Parse({"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1",
                     "--rdzv-conf=keep_alive_interval=2.5,join_timeout=86400,is_host=1",
                     "--local-addr=node-3.cluster", "--rdzv-id=" + std::string(256, 'i'), script_})
                  .ok());
}

// c10d takes a list of endpoints (where a run that failed over may be served); static does not.
TEST_F(CliTest, EndpointListsForC10dAndEtcdNotStatic) {
  EXPECT_TRUE(Parse({"--rdzv-backend=c10d", "--rdzv-endpoint=n0:29400,n1,n2", script_}).ok());
  EXPECT_THAT(Error({"--rdzv-backend=static", "--rdzv-endpoint=n0:29400,n1", script_}),
              HasSubstr("--rdzv-backend=static takes one HOST[:PORT]"));
}

// The static rendezvous' own keys mean nothing to another backend: refused, naming it.
TEST_F(CliTest, StaticKeysOnlyWithTheStaticBackend) {
  EXPECT_THAT(Error({"--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1",
                     "--rdzv-conf=static_port=29600", script_}),
              HasSubstr("--rdzv-conf static_port=29600: only for --rdzv-backend=static (c10d "
                        "given)"));
  EXPECT_THAT(Error({"--standalone", "--rdzv-conf=static_coordination=none", script_}),
              HasSubstr("--rdzv-conf static_coordination=none: only for --rdzv-backend=static "
                        "(--standalone given)"));
  EXPECT_TRUE(
      Parse({"--nnodes=2", "--node-rank=1", "--rdzv-conf=static_coordination=none", script_}).ok());
}

// Issue 28 #19: a directory passed the executable check and every worker failed with 127.
TEST_F(CliTest, NoPythonProgramIsARegularExecutableFile) {
  EXPECT_THAT(Error({"--no-python", "/tmp"}), HasSubstr("/tmp: not a regular file"));
  EXPECT_THAT(Error({"--no-python", dir_.path()}), HasSubstr("not a regular file"));
  // In PATH, a directory of that name is skipped as execvp skips it.
  const std::string bin = dir_.File("bin");
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((bin + "/tool").c_str(), 0755), 0);
  env_["PATH"] = bin + ":/usr/bin:/bin";
  EXPECT_THAT(Error({"--no-python", "tool"}), HasSubstr("tool: not found in PATH"));
  EXPECT_TRUE(Parse({"--no-python", "true"}).ok());
}

// Issue 28 #15, #13, #8: a config file is one regular file of bounded size, each flag once.
TEST_F(CliTest, ConfigFileIsBoundedAndSaysEachFlagOnce) {
  const std::string cfg = dir_.File("job.yaml");
  testing::WriteFile(cfg, "nnodes: 1\nmax-restarts: 2\nnnodes: 2\n");
  EXPECT_EQ(Error({"--config", cfg, script_}), cfg + ":3: nnodes is given again (first on line 1)");
  testing::WriteFile(cfg, "nproc-per-node: 2\n# comment\nnproc_per_node: 4\n");
  EXPECT_EQ(Error({"--config", cfg, script_}),
            cfg + ":3: nproc_per_node is given again (first on line 1 as nproc-per-node)");
  testing::WriteFile(cfg, "script: a.py\nentrypoint: b.py\n");
  EXPECT_THAT(Error({"--config", cfg}), HasSubstr(cfg + ":2: entrypoint is given again"));
  testing::WriteFile(cfg, "rdzv-conf: {join_timeout: 1, join_timeout: 2}\n");
  EXPECT_THAT(Error({"--config", cfg, script_}),
              HasSubstr(cfg + ":1: rdzv-conf: join_timeout is given again"));
  EXPECT_THAT(Error({"--config", dir_.path(), script_}),
              HasSubstr("--config=" + dir_.path() + ": is a directory"));
  testing::WriteFile(cfg, "nnodes: 1\n" + std::string(2 << 20, '#') + "\n");
  EXPECT_THAT(Error({"--config", cfg, script_}),
              HasSubstr("--config=" + cfg + ": larger than the limit of 1048576 bytes"));
  testing::WriteFile(cfg, "nnodes: 1\nnode-rank: 0\n");
  EXPECT_TRUE(Parse({"--config", cfg, script_}).ok());
}

TEST_F(CliTest, StdSpecs) {
  auto all = ParseStdSpec("--tee", "3");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->For(5), 3);
  auto per = ParseStdSpec("--tee", "0:1,1:2");
  ASSERT_TRUE(per.ok());
  EXPECT_EQ(per->For(0), 1);
  EXPECT_EQ(per->For(1), 2);
  EXPECT_EQ(per->For(2), 0);
  EXPECT_FALSE(ParseStdSpec("--tee", "0:9").ok());
  EXPECT_FALSE(ParseStdSpec("--tee", "a").ok());
}

TEST_F(CliTest, SignalsToHandle) {
  auto o = Parse({"--signals-to-handle=SIGTERM,SIGUSR1,USR2", script_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->extra_signals, ElementsAre(SIGUSR1, SIGUSR2));
  EXPECT_EQ(SignalFromName("SIGKILL"), SIGKILL);
  EXPECT_EQ(SignalFromName("term"), SIGTERM);
  EXPECT_EQ(SignalFromName("15"), 15);
  EXPECT_EQ(SignalFromName("SIGWHAT"), 0);
}

TEST_F(CliTest, HelpAndVersion) {
  auto h = ParseCommandLine({"--help"}, env_, host_);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->exit_now);
  EXPECT_THAT(h->text, HasSubstr("--nproc-per-node, --nproc_per_node"));
  EXPECT_THAT(h->text, HasSubstr("--rdzv-conf"));
  auto v = ParseCommandLine({"--version"}, env_, host_);
  ASSERT_TRUE(v.ok());
  EXPECT_THAT(v->text, HasSubstr("ddprun "));
}

}  // namespace
}  // namespace ddprun::launcher
