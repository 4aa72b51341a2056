#!/usr/bin/env python3
"""ddprun and ddp-train on a GPU machine (issue 27), every check in one run.

  bench/gpu/run.sh                 # on the GPU machine, from the repository root (see there)
  bench/gpu/gpu_bench.py --cpu     # the same script on a CPU machine: gloo, small, no reference

Parts, in this order (each bounded; one that fails is reported and the next one runs):
  env         the GPU, driver, torch and CPUs seen
  detect      ddprun --nproc-per-node=gpu: one worker per GPU, each on its LOCAL_RANK device;
              --numa-binding=node: the CPUs each worker may run on
  resnet50    ddp-train imagenet --arch resnet50 (NCCL, bf16 autocast, channels-last) against
              PyTorch's DDP ResNet-50 under torchrun (torch_resnet_ddp.py: torchvision model,
              DataLoader workers) on the same GPU, same batch, same generated JPEG ImageFolder,
              back to back; images/s of each epoch after the first, medians
  resume      ddp-train mnist --deterministic on the GPU: two straight runs, and one stopped
              after epoch 1 and resumed from its checkpoint; final models compared byte for byte
  kill        a worker SIGKILLed mid-training with NCCL: ddprun's cold restart, resumed from the
              last checkpoint; the final model against the straight run's
  inprocess   two ranks on the one GPU (gloo on CUDA tensors: NCCL refuses two ranks on one
              device), --restart-mode=in-process, rank 1 SIGKILLed: the survivor keeps its
              process and CUDA state; the final model against a straight two-rank run
  hang        --hang-timeout: a rank hung after step 30 (ddp-train's --fault), its peer blocked
              inside the all-reduce on CUDA tensors; then one NCCL rank hung: stacks, restart
  preload     Python workers that initialise CUDA, restarted with and without --preload=torch:
              failure -> restarted workers' CUDA ready; spares hold no CUDA context
  synthetic   the reference on one random batch kept on the GPU (no input pipeline): the ceiling

Writes OUT/results.json, OUT/summary.md and OUT/logs.tar.gz (every command's output).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def recovery_lines(text):
    """ddprun's timeline of the first restart and its recovery summary, from a run's output."""
    lines = text.splitlines()
    return {"restart_line": [l for l in lines if "restart 1:" in l][:2],
            "recovered": [l for l in lines if "recovered (" in l][:2]}


class Bench:
    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        self.work = os.path.abspath(a.work)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.results = {"device": "cpu" if a.cpu else "cuda", "parts": {}}
        self.summary = []
        self.ddprun = os.path.abspath(a.ddprun)
        self.train = os.path.abspath(a.ddp_train)
        self.py = a.python
        self.data_py = a.data_python or a.python
        self.deadline = time.time() + a.budget
        dev = ["--device", "cpu", "--backend", "gloo"] if a.cpu else ["--device", "cuda"]
        self.nccl = dev + ([] if a.cpu else ["--backend", "nccl"])
        self.gloo_gpu = ["--device", "cpu" if a.cpu else "cuda", "--backend", "gloo"]

    # -- helpers ---------------------------------------------------------------------------
    def log_path(self, name):
        return os.path.join(self.logs, name + ".log")

    def run(self, name, argv, timeout, env=None, check=True):
        """Runs argv, output to logs/NAME.log; returns (rc, text, seconds)."""
        t0 = time.time()
        e = dict(os.environ, **(env or {}))
        with open(self.log_path(name), "w") as f:
            f.write("$ " + " ".join(argv) + "\n")
            f.flush()
            try:
                p = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=e,
                                   timeout=min(timeout, max(5, self.deadline - time.time())),
                                   start_new_session=True)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        text = open(self.log_path(name)).read()
        if check and rc != 0:
            raise RuntimeError("%s: exit %s after %.1f s; last lines:\n%s" % (
                name, rc, time.time() - t0, "\n".join(text.splitlines()[-15:])))
        return rc, text, time.time() - t0

    def start(self, name, argv, env=None):
        e = dict(os.environ, **(env or {}))
        f = open(self.log_path(name), "w")
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=e,
                                start_new_session=True)

    def wait_log(self, name, pattern, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, open(self.log_path(name)).read())
            if m:
                return m
            time.sleep(0.05)
        raise RuntimeError("%s: no /%s/ within %.0f s" % (name, pattern, timeout))

    def finish(self, name, p, timeout):
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rc = "timeout"
        text = open(self.log_path(name)).read()
        if rc != 0:
            raise RuntimeError("%s: exit %s; last lines:\n%s" % (
                name, rc, "\n".join(text.splitlines()[-20:])))
        return text

    def ddprun_argv(self, *flags):
        return [self.ddprun, "--standalone"] + list(flags)

    def train_argv(self, *args):
        return ["--no-python", self.train] + list(args)

    @staticmethod
    def sha(path):
        return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]

    def descendants(self, pid):
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            try:
                kids = [int(c) for c in open("/proc/%d/task/%d/children" % (p, p)).read().split()]
            except OSError:
                kids = []
            out += kids
            todo += kids
        return out

    def worker_pid(self, agent_pid, rank):
        """The ddp-train process of global rank `rank` under the agent."""
        for c in self.descendants(agent_pid):
            try:
                if not open("/proc/%d/comm" % c).read().startswith("ddp-train"):
                    continue
                env = open("/proc/%d/environ" % c, "rb").read().split(b"\0")
                if ("RANK=%d" % rank).encode() in env:
                    return c
            except OSError:
                pass
        return None

    def part(self, name, fn):
        if time.time() > self.deadline - 10:
            self.results["parts"][name] = {"status": "skipped: out of time"}
            self.summary.append("- **%s**: skipped (the run's time budget was spent)" % name)
            return
        t0 = time.time()
        try:
            r = fn() or {}
            r["status"] = "ok"
        except Exception as e:  # noqa: BLE001 (each part is reported, the next one runs)
            r = {"status": "failed", "error": str(e)[-3000:]}
            self.summary.append("- **%s**: FAILED: %s" % (name, str(e).splitlines()[0][:300]))
        r["seconds"] = round(time.time() - t0, 1)
        self.results["parts"][name] = r
        print("[gpu_bench] %s: %s (%.0f s)" % (name, r["status"], r["seconds"]), flush=True)
        self.save()

    def save(self):
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1)
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write("\n".join(self.summary) + "\n")
        with tarfile.open(os.path.join(self.out, "logs.tar.gz"), "w:gz") as t:
            t.add(self.logs, arcname="logs")

    # -- parts -----------------------------------------------------------------------------
    def env(self):
        r = {}
        if shutil.which("nvidia-smi"):
            r["gpus"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                       text=True).stdout.strip()
            r["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True, text=True).stdout.strip()
            self.run("env-topo", ["nvidia-smi", "topo", "-m"], 30, check=False)
        r["torch"] = subprocess.run(
            [self.py, "-c", "import torch; print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available(), torch.cuda.nccl.version() if torch.cuda.is_available() "
             "else '')"], capture_output=True, text=True).stdout.strip()
        r["cpus"] = os.cpu_count()
        self.summary.append("- **env**: %s; driver %s; torch %s; %d CPUs" % (
            r.get("gpus", "no GPU"), r.get("driver", "-"), r["torch"], r["cpus"]))
        return r

    def detect(self):
        show = ("echo rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE "
                "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)")
        nproc = "--nproc-per-node=cpu" if self.a.cpu else "--nproc-per-node=gpu"
        _, text, _ = self.run("detect", self.ddprun_argv(nproc, "--no-python", "sh", "-c", show), 60)
        lines = re.findall(r"rank=\d+ local=\d+ world=\d+ cpus=\S*", text)
        r = {"workers": lines}
        # Each worker on its LOCAL_RANK device: what ddp-train itself reports.
        _, t2, _ = self.run("detect-device", self.ddprun_argv(
            nproc, "--no-python", self.py, "-c",
            "import os, torch; lr = int(os.environ['LOCAL_RANK']); "
            "print('local_rank', lr, 'devices', torch.cuda.device_count(), "
            "'name', torch.cuda.get_device_name(lr) if torch.cuda.is_available() else 'cpu')"),
            120)
        r["devices"] = re.findall(r"local_rank \d+ devices \d+ name .*", t2)
        if not self.a.cpu:
            rc, t3, _ = self.run("detect-numa", self.ddprun_argv(
                nproc, "--numa-binding=node", "--no-python", "sh", "-c", show), 60, check=False)
            r["numa_binding"] = {"rc": rc, "workers": re.findall(r"rank=\d+ .*cpus=\S*", t3),
                                 "said": [l for l in t3.splitlines() if "numa" in l.lower()][:5]}
        self.summary.append("- **detect**: %s; %s; --numa-binding=node: %s" % (
            "; ".join(lines), "; ".join(r["devices"]), r.get("numa_binding", "n/a")))
        return r

    def resnet50(self):
        data = os.path.join(self.work, "imagefolder-%d" % self.a.image_px)
        if not os.path.isdir(data):
            self.run("data-imagefolder", [self.data_py, os.path.join(HERE, "make_data.py"),
                                          "imagefolder", data, "--classes", str(self.a.classes),
                                          "--per-class", str(self.a.per_class),
                                          "--size", str(self.a.image_px)], 300)
        bs, epochs, arch = str(self.a.batch_size), str(self.a.epochs), self.a.arch
        workers = str(max(1, (os.cpu_count() or 2) - 2))
        r = {"batch_size": self.a.batch_size, "epochs": self.a.epochs, "arch": arch,
             "image_px": self.a.image_px,
             "images": self.a.classes * self.a.per_class, "workers": workers}

        def median_after_first(path, key):
            rows = [json.loads(l) for l in open(path) if l.strip()]
            vals = [row[key] for row in rows[1:]] or [row[key] for row in rows]
            return statistics.median(vals), [round(v, 1) for v in (row[key] for row in rows)]

        mine = os.path.join(self.work, "ddp-train-metrics.jsonl")
        fast = [] if self.a.cpu else ["--amp", "--channels-last"]
        _, _, secs = self.run("resnet50-ddp-train", self.ddprun_argv(
            "--nproc-per-node=1") + self.train_argv(
            "imagenet", "--data", data, "--arch", arch, "--batch-size", bs, "--epochs", epochs,
            "-j", workers, "--metrics-file", mine, "--log-interval", "8",
            "--checkpoint-dir", os.path.join(self.work, "ck-resnet")) + self.nccl + fast, 400)
        r["ddp_train"], r["ddp_train_epochs"] = median_after_first(mine, "samples_per_s")
        r["ddp_train_wall_s"] = round(secs, 1)
        have_tv = subprocess.run([self.py, "-c", "import torchvision"]).returncode == 0
        if have_tv and not self.a.cpu:
            ref = os.path.join(self.work, "torch-metrics.jsonl")
            _, _, secs = self.run("resnet50-torch", [
                self.py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                os.path.join(HERE, "torch_resnet_ddp.py"), "--data", data, "--arch", arch,
                "--batch-size", bs, "--epochs", epochs, "--workers", workers,
                "--metrics-file", ref] + fast, 400)
            r["torch"], r["torch_epochs"] = median_after_first(ref, "images_per_s")
            r["torch_wall_s"] = round(secs, 1)
            r["ratio"] = r["ddp_train"] / r["torch"]
        self.summary.append(
            "- **resnet50** (%s, batch %s, %d JPEGs %dx%d cropped to 224, %s decode "
            "threads/workers, epochs 2-%s median): ddp-train %.0f images/s %s; PyTorch DDP under "
            "torchrun %s%s" % (
                arch, bs, r["images"], self.a.image_px, self.a.image_px, workers, epochs,
                r["ddp_train"], r["ddp_train_epochs"],
                "%.0f images/s %s" % (r["torch"], r["torch_epochs"]) if "torch" in r else "not run",
                "; ratio %.2f" % r["ratio"] if "ratio" in r else ""))
        return r

    def mnist_data(self):
        data = os.path.join(self.work, "mnist")
        if not os.path.isdir(data):
            self.run("data-mnist", [self.data_py, os.path.join(HERE, "make_data.py"), "mnist", data],
                     120)
        return data

    def model_path(self, name):
        """WORK/NAME/model.pt: one file name for every model, because torch::save names the
        records inside the archive after the file, so that equal models are equal bytes."""
        os.makedirs(os.path.join(self.work, name), exist_ok=True)
        return os.path.join(self.work, name, "model.pt")

    def mnist_args(self, data, epochs, model, *extra):
        return ["mnist", "--data", data, "--epochs", str(epochs), "--seed", "1",
                "--log-interval", "10", "--save-model", "--save-model-path", model,
                "--no-progress-bar"] + list(extra)

    def resume(self):
        data = self.mnist_data()
        det = ["--deterministic"]
        r = {}
        models = {}
        for name in ("straight-1", "straight-2"):
            models[name] = self.model_path(name)
            self.run("resume-" + name, self.ddprun_argv("--nproc-per-node=1") + self.train_argv(
                *self.mnist_args(data, 2, models[name], *det)) + self.nccl, 180)
        ck = os.path.join(self.work, "ck-resume")
        models["resumed"] = self.model_path("resumed")
        self.run("resume-epoch1", self.ddprun_argv("--nproc-per-node=1") + self.train_argv(
            *self.mnist_args(data, 1, self.model_path("epoch1"), *det,
                             "--checkpoint-dir", ck)) + self.nccl, 180)
        _, text, _ = self.run("resume-epoch2", self.ddprun_argv("--nproc-per-node=1") +
                              self.train_argv(*self.mnist_args(data, 2, models["resumed"], *det,
                                                               "--checkpoint-dir", ck)) +
                              self.nccl, 180)
        r["resumed_said"] = [l for l in text.splitlines() if "resum" in l.lower()][:3]
        if not self.a.cpu:
            models["nondeterministic"] = self.model_path("nondet")
            self.run("resume-nondeterministic", self.ddprun_argv("--nproc-per-node=1") +
                     self.train_argv(*self.mnist_args(data, 2, models["nondeterministic"])) +
                     self.nccl, 180)
        r["sha256"] = {k: self.sha(v) for k, v in models.items()}
        r["straight_runs_identical"] = r["sha256"]["straight-1"] == r["sha256"]["straight-2"]
        r["resumed_identical"] = r["sha256"]["resumed"] == r["sha256"]["straight-1"]
        self.straight_model = r["sha256"]["straight-1"]
        self.summary.append(
            "- **resume** (mnist, --deterministic, 2 epochs): two straight runs identical: %s; "
            "stopped after epoch 1 and resumed = straight: %s; models %s" % (
                r["straight_runs_identical"], r["resumed_identical"], r["sha256"]))
        return r

    def kill_at_step(self, name, argv, step, rank):
        """Runs argv, SIGKILLs the ddp-train of `rank` once the log shows `step`; its output."""
        p = self.start(name, argv)
        self.wait_log(name, r"step %d\b" % step, 120)
        victim = self.worker_pid(p.pid, rank)
        if victim is None:
            raise RuntimeError("no ddp-train process of rank %d under ddprun" % rank)
        os.kill(victim, signal.SIGKILL)
        return self.finish(name, p, 240)

    def kill(self):
        data = self.mnist_data()
        model = self.model_path("killed")
        text = self.kill_at_step("kill-cold", self.ddprun_argv(
            "--nproc-per-node=1", "--max-restarts=1") + self.train_argv(*self.mnist_args(
                data, 2, model, "--deterministic", "--checkpoint-dir",
                os.path.join(self.work, "ck-kill"), "--checkpoint-every", "20")) + self.nccl,
            50, 0)
        r = dict(recovery_lines(text), sha256=self.sha(model))
        r["identical_to_straight"] = r["sha256"] == getattr(self, "straight_model", None)
        self.summary.append("- **kill** (NCCL, cold restart from the step-40 checkpoint): %s; "
                            "final model = straight run: %s" % (
                                " / ".join(r["restart_line"]) or "no restart line",
                                r["identical_to_straight"]))
        return r

    def inprocess(self):
        data = self.mnist_data()
        straight = self.model_path("two-straight")
        self.run("inprocess-straight", self.ddprun_argv("--nproc-per-node=2") + self.train_argv(
            *self.mnist_args(data, 2, straight, "--deterministic")) + self.gloo_gpu, 240)
        model = self.model_path("two-inprocess")
        text = self.kill_at_step("inprocess-kill", self.ddprun_argv(
            "--nproc-per-node=2", "--max-restarts=1", "--restart-mode=in-process") +
            self.train_argv(*self.mnist_args(
                data, 2, model, "--deterministic", "--checkpoint-dir",
                os.path.join(self.work, "ck-inproc"), "--checkpoint-every", "20")) +
            self.gloo_gpu, 30, 1)
        r = dict(recovery_lines(text),
                 sha256={"straight": self.sha(straight), "in-process": self.sha(model)})
        r["identical"] = r["sha256"]["straight"] == r["sha256"]["in-process"]
        self.summary.append("- **inprocess** (2 ranks on the GPU, gloo on CUDA tensors, rank 1 "
                            "SIGKILLed): %s; final model = straight 2-rank run: %s" % (
                                " / ".join(r["restart_line"]) or "no restart line",
                                r["identical"]))
        return r

    def hang(self):
        data = self.mnist_data()
        r = {}
        cases = [("hang-collective", ["--nproc-per-node=2"], self.gloo_gpu, "hang@30:1")]
        if not self.a.cpu:
            cases.append(("hang-nccl", ["--nproc-per-node=1"], self.nccl, "hang@30:0"))
        for name, nproc, backend, fault in cases:
            # LibTorch with CUDA shows its first sign of life 4-6 s after its start on the H200:
            # a --hang-timeout below that needs the start's own allowance.
            startup = (["--hang-startup-timeout=%d" % self.a.hang_startup_timeout]
                       if self.a.hang_startup_timeout else [])
            rc, text, secs = self.run(name, self.ddprun_argv(
                *nproc, "--max-restarts=1", "--hang-timeout=%d" % self.a.hang_timeout,
                *startup) + self.train_argv(
                *self.mnist_args(data, 1, self.model_path(name),
                                 "--checkpoint-dir", os.path.join(self.work, "ck-" + name),
                                 "--checkpoint-every", "10", "--fault", fault)) + backend, 240,
                check=False)
            lines = text.splitlines()
            frames = 0
            kept = re.search(r"stacks of the hung attempt: ([^;\s]+)", text)
            for i, path in enumerate(sorted(glob.glob(kept.group(1))) if kept else []):
                shutil.copy(path, self.log_path("%s-stacks-%d" % (name, i)))
                frames += sum(1 for l in open(path) if re.match(r"\s*#\d+\s+0x", l))
            r[name] = {
                "rc": rc,
                "detected": [l for l in lines if "hung" in l or "hang" in l.lower()][:4],
                "stack_frames": frames,
                "restart": recovery_lines(text)["restart_line"], "seconds": round(secs, 1)}
        self.summary.append("- **hang** (--hang-timeout=%d, --hang-startup-timeout=%s): %s" % (
            self.a.hang_timeout, self.a.hang_startup_timeout or "-", "; ".join(
            "%s: exit %s, detected %s, %d stack frames, %s" % (
                k, v["rc"], bool(v["detected"]), v["stack_frames"],
                " / ".join(v["restart"]) or "no restart") for k, v in r.items())))
        failed = [k for k, v in r.items() if v["rc"] != 0]
        if failed:
            raise RuntimeError("hang: %s did not finish after the restart: %s" % (failed, r))
        return r

    def preload(self):
        worker = os.path.join(HERE, "cuda_ready_worker.py")
        r = {}
        for i in range(self.a.preload_runs):
            for name, extra in (("plain", []), ("preload", ["--preload=torch"])):
                d = os.path.join(self.work, "preload-%s-%d" % (name, i))
                os.makedirs(d, exist_ok=True)
                env = {"BENCH_DIR": d, "BENCH_FAIL_AFTER": "4", "PYTHON_EXEC": self.py,
                       "BENCH_DEVICE": "cpu" if self.a.cpu else "cuda"}
                log = "preload-%s-%d" % (name, i)
                p = self.start(log, self.ddprun_argv("--nproc-per-node=2", "--max-restarts=1") +
                               extra + [worker], env=env)
                if name == "preload" and i == 0 and not self.a.cpu:
                    deadline = time.time() + 60
                    while not os.path.exists(os.path.join(d, "ready-0-1")) and time.time() < deadline:
                        time.sleep(0.05)
                    time.sleep(2.5)  # the spares have imported torch by now
                    workers = set()
                    for k in (0, 1):
                        try:
                            workers.add(int(open(os.path.join(d, "pid-0-%d" % k)).read()))
                        except OSError:
                            pass
                    spares = [c for c in self.descendants(p.pid) if c not in workers and
                              open("/proc/%d/comm" % c).read().strip().startswith("python")]
                    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid",
                                           "--format=csv,noheader"], capture_output=True,
                                          text=True).stdout.split()
                    r["spares"] = spares
                    r["workers"] = sorted(workers)
                    r["compute_apps"] = apps
                    r["spares_with_cuda"] = [s for s in spares if str(s) in apps]
                self.finish(log, p, 120)
                fail = float(open(os.path.join(d, "fail")).read())
                ready = max(float(open(os.path.join(d, "ready-1-%d" % k)).read()) for k in (0, 1))
                r.setdefault(name, []).append(round((ready - fail) * 1000))
        med = {k: statistics.median(r[k]) for k in ("plain", "preload")}
        r["median_ms"] = med
        self.summary.append(
            "- **preload** (2 Python workers on the GPU, failure -> restarted workers' CUDA "
            "ready, medians of %d): without %s ms %s, --preload=torch %s ms %s; spares holding a "
            "CUDA context: %s (spares %s, compute apps %s)" % (
                self.a.preload_runs, med["plain"], r["plain"], med["preload"], r["preload"],
                r.get("spares_with_cuda", "not checked"), r.get("spares", "-"),
                r.get("compute_apps", "-")))
        return r

    def synthetic(self):
        ref = os.path.join(self.work, "torch-synthetic.jsonl")
        self.run("resnet50-torch-synthetic", [
            self.py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
            os.path.join(HERE, "torch_resnet_ddp.py"), "--synthetic", "--arch", self.a.arch,
            "--batch-size", str(self.a.batch_size), "--epochs", "3", "--metrics-file", ref,
            "--amp", "--channels-last"], 300)
        rows = [json.loads(l) for l in open(ref) if l.strip()]
        v = statistics.median([row["images_per_s"] for row in rows[1:]])
        self.summary.append("- **synthetic** (the reference on one batch kept on the GPU, no "
                            "input pipeline): %.0f images/s" % v)
        return {"torch_synthetic": v}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ddprun", required=True)
    ap.add_argument("--ddp-train", required=True, help="ddp-train, or the torch2 bundle's run")
    ap.add_argument("--python", default="python3")
    ap.add_argument("--data-python", help="python with numpy and PIL for make_data.py "
                    "(default: --python)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--parts", default="env,detect,resnet50,resume,kill,inprocess,hang,preload,"
                                       "synthetic")
    ap.add_argument("--budget", type=float, default=480, help="seconds for all parts")
    ap.add_argument("--cpu", action="store_true", help="a dry run on a machine without a GPU")
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--per-class", type=int, default=512)
    ap.add_argument("--image-px", type=int, default=256,
                    help="side of the generated JPEGs (smaller: cheaper to decode)")
    ap.add_argument("--preload-runs", type=int, default=3)
    ap.add_argument("--hang-timeout", type=int, default=20)
    ap.add_argument("--hang-startup-timeout", type=int, default=0, help="0: not given")
    a = ap.parse_args()
    b = Bench(a)
    for name in a.parts.split(","):
        b.part(name, getattr(b, name))
    b.save()
    print("\n".join(b.summary))


if __name__ == "__main__":
    main()
