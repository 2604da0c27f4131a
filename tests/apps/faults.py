#!/usr/bin/env python3
"""Fault injection with real MPI ranks (halox-md; by default on the CPU, 4 ranks, host
transport): a rank stopped with SIGSTOP makes its peers end the job within the exchange
time-out + 10 s, naming it; a rank killed with SIGKILL ends the job; a rank stopped and
continued within the time-out changes nothing (the result equals an undisturbed run's).

The run has no neighbour searches and thermo output only at its ends (--nstlist and
--thermo 0), so that between its first and last steps its ranks only exchange halos.

usage: faults.py MPIEXEC HALOX_MD [--np N] [--steps N] [-- halox-md arguments, e.g.
                  --device gpu --transport nvshmem-fused]
--steps: the length of the undisturbed and the stopped-and-continued runs (default 1500)
--only stop,kill: run only those scenarios (stop, collectives, continue, kill; in that order:
        a killed MPS client may leave the GPU to the next job in a state of its own)
"""
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TIMEOUT = 5.0  # ExchangeOptions::timeout_seconds, halox-md's default


def rank_pids(launcher, program):
    """{MPI rank: pid} of the launcher's program processes (from their environment)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if not cmd or not cmd[0].endswith(program.encode()):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            if env.get(b"OMPI_COMM_WORLD_RANK") is not None and \
                    int(env.get(b"HALOX_FAULT_JOB", b"0")) == launcher.pid:
                found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, ValueError):
            continue
    return found


NP = 4
EXTRA = ["--device", "cpu", "--cells", "6"]


class Job:
    """A launched mpiexec whose stdout and stderr are read as they come (so that the test can
    wait for a line, and a pipe never fills)."""

    def __init__(self, args, env=None):
        self.p = subprocess.Popen(args, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(f, lines), daemon=True)
                        for f, lines in ((self.p.stdout, self.out), (self.p.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(f, lines):
        for line in f:
            lines.append(line)

    @property
    def pid(self):
        return self.p.pid

    def poll(self):
        return self.p.poll()

    def text(self):
        return "".join(self.out), "".join(self.err)

    def finish(self, limit):
        """(rc, stdout, stderr) once the job ended; rc None when it outlived `limit` seconds."""
        try:
            rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        for r in self.readers:
            r.join(timeout=10)
        return (rc,) + self.text()


def start(mpiexec, md, steps, json_path, run=("--nstlist", "100000000", "--thermo", "0"),
          attempt=1):
    """Starts the job; returns it and {rank: pid} once every rank runs and rank 0 has printed
    its set-up summary (its "halo:" line: every rank is past its set-up collectives). By
    default without searches and with thermo output only at the ends: between them the ranks
    only exchange."""
    args = [mpiexec, "-n", str(NP), "--oversubscribe", "-x", "HALOX_FAULT_JOB", md] + EXTRA + [
        "--steps", str(steps)] + list(run) + ["--quiet", "--json", json_path]
    # The launcher's pid tags its ranks (exec keeps it), so their environments name their job.
    job = Job(["sh", "-c", 'HALOX_FAULT_JOB=$$ exec "$@"', "sh"] + args)
    deadline = time.time() + 120
    pids = {}
    while time.time() < deadline:
        if len(pids) < NP:
            pids = rank_pids(job, os.path.basename(md))
        if len(pids) == NP and any(l.startswith("halo:") for l in job.out):
            return job, pids
        if job.poll() is not None:
            rc, out, err = job.finish(10)
            if "busy or unavailable" in err and attempt < 3:
                # The MPS server still frees the contexts of the previous job's killed
                # processes (seen for a few seconds after a SIGKILL on the H200).
                time.sleep(5)
                return start(mpiexec, md, steps, json_path, run, attempt + 1)
            sys.exit(f"FAILED: the job ended (rc {rc}) before its {NP} ranks were seen "
                     f"stepping:\n{out}\n{err}")
        time.sleep(0.1)
    # Say what was seen: the processes of this job and what the job printed so far.
    listing = subprocess.run(["ps", "-eo", "pid,ppid,stat,etime,args"], capture_output=True,
                             text=True).stdout
    mine = "\n".join(l for l in listing.splitlines() if os.path.basename(md) in l or
                     "mpirun" in l or "orted" in l)
    rc, out, err = job.finish(0)
    sys.exit(f"FAILED: after 120 s {len(pids)} of the {NP} ranks seen ({pids}), set-up "
             f"summary {'printed' if 'halo:' in out else 'not printed'}; processes:\n"
             f"{mine}\nthe job's output:\n{out}\n{err}")


# A search and a reduction every step, and a search every 200 steps without thermo output. The
# latter with a shorter time step and a wider skin, which keep its lists valid: at halox-md's
# defaults (dt 0.005, skin 0.6) atoms move up to 1.88 between searches 200 steps apart, pairs
# are missed at every search and the energy drifts 8% in 30,000 steps (the CPU, 12 cells, 2
# ranks). Such a run may end on its own physics: on an H100 (nvshmem-pulse) an atom crossed
# more than a domain between two migrations before the stop came, and the job ended on that.
# dt 0.0004 and skin 1.0: at most 0.39 (4,000 steps, 12 cells, the CPU), no pair missed.
COLLECTIVES = (("--nstlist", "1", "--thermo", "1"),
               ("--nstlist", "200", "--thermo", "0", "--dt", "0.0004", "--skin", "1.0"))


def main():
    global NP, EXTRA
    mpiexec, md = sys.argv[1:3]
    rest = sys.argv[3:]
    head = rest[:rest.index("--")] if "--" in rest else rest
    if "--" in rest:
        EXTRA = rest[rest.index("--") + 1:]
    if "--np" in head:
        NP = int(head[head.index("--np") + 1])
    cont_steps = int(head[head.index("--steps") + 1]) if "--steps" in head else 1500
    only = set(head[head.index("--only") + 1].split(",")) if "--only" in head else {
        "stop", "kill", "collectives", "continue"}
    stalled, killed, paused = (2, 1, 3) if NP >= 4 else (NP - 1, NP - 1, NP - 1)
    with tempfile.TemporaryDirectory() as work:
        if "stop" in only:  # the job ends within the time-out + 10 s, the stopped rank named
            rc, err, took, _ = signal_one(mpiexec, md, os.path.join(work, "stop.json"),
                                          stalled, signal.SIGSTOP)
            named = f"waiting for rank {stalled}"
            if rc is None or rc == 0 or named not in err:
                sys.exit(f"FAILED: SIGSTOP of rank {stalled}: rc {rc} after {took:.1f} s\n{err}")
            line = next(l for l in err.splitlines() if named in l)
            # Rank 0 prints one table of every rank's state, the stalled one without a report.
            rows = [l for l in err.splitlines() if l.strip().startswith("rank ") and "  " in l]
            stalled_row = next((l for l in rows if l.split()[1] == str(stalled)), "")
            if "the ranks' states" not in err or "no error reported" not in stalled_row:
                sys.exit(f"FAILED: SIGSTOP of rank {stalled}: no table naming it\n{err}")
            print(f"ok: SIGSTOP of rank {stalled} ended the job in {took:.1f} s (rc {rc}):\n"
                  f"    {line}\n    table row: {stalled_row.strip()}")
        if "collectives" in only:
            # Stopped at a random moment of a run that searches and reduces every step, and of
            # one that searches every 200 steps: the ranks that wait name the stopped one
            # within the time-out + 3 s (the searches' collectives and the thermo reductions
            # are bounded and run a roll call), not the watchdog.
            seed = int(os.environ.get("HALOX_TEST_SEED", random.randrange(1 << 30)))
            print(f"[seed] faults.py collectives: HALOX_TEST_SEED={seed}")
            rng = random.Random(seed)
            for run in COLLECTIVES:
                delay = rng.uniform(1.5, 3.5)
                rc, err, took, named = signal_one(mpiexec, md,
                                                  os.path.join(work, "collective.json"), stalled,
                                                  signal.SIGSTOP, run, delay)
                case = f"SIGSTOP of rank {stalled} {delay:.2f} s into a run with {' '.join(run)}"
                if rc is None or rc == 0 or named is None or named > TIMEOUT + 3:
                    sys.exit(f"FAILED: {case}: rc {rc}, named after "
                             f"{'never' if named is None else f'{named:.1f} s'} (limit "
                             f"{TIMEOUT + 3:.0f} s)\n{err}")
                line = next(l for l in err.splitlines() if f"waiting for rank {stalled}" in l)
                print(f"ok: {case}: named after {named:.1f} s, the job ended in {took:.1f} s "
                      f"(rc {rc}):\n    {line}")
        if "continue" in only:  # stopped and continued within the time-out: nothing changes
            def final_thermo(name, pause=False):
                path = os.path.join(work, name)
                job, pids = start(mpiexec, md, cont_steps, path)
                if pause:
                    os.kill(pids[paused], signal.SIGSTOP)
                    time.sleep(TIMEOUT / 2)
                    os.kill(pids[paused], signal.SIGCONT)
                rc, out, err = job.finish(300)
                if rc != 0:
                    sys.exit(f"FAILED: the {'stopped and continued' if pause else 'undisturbed'}"
                             f" run: rc {rc}\n{out}\n{err}")
                with open(path) as f:
                    thermo = json.load(f)["thermo"]
                # The last row, with the band the total energy moved in over the run.
                totals = [row["total"] for row in thermo]
                return dict(thermo[-1], band=(max(totals) - min(totals)) / abs(totals[-1]))

            def differ(a, b, keys):
                return max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-300) for k in keys)

            keys = ("temperature", "potential", "total", "pressure")
            ref, again = final_thermo("ref.json"), final_thermo("again.json")
            got = final_thermo("cont.json", pause=True)
            if got["step"] != ref["step"]:
                sys.exit(f"FAILED: stopped and continued: {got} != undisturbed {ref}")
            spread = differ(again, ref, keys)
            if spread <= 1e-12:  # the transport reproduces itself: so must the continued run
                worst = differ(got, ref, keys)
                if worst > 1e-12:
                    sys.exit(f"FAILED: stopped and continued: {got} != undisturbed {ref}")
                print(f"ok: rank {paused} stopped for {TIMEOUT / 2:.1f} s and continued: the "
                      f"same final thermo as the undisturbed run (step {got['step']}, total "
                      f"{got['total']:.10f})")
            else:
                # Reverse sums in atomics (the fused kernels: several pulses add into one home
                # atom at once) make two undisturbed runs differ in their last bits, and
                # 20,000 chaotic steps make that a different trajectory. What a stale or lost
                # exchange would break is the conserved total energy: it must stay within ten
                # times the undisturbed runs' own spread of it, or within the band their total
                # energy moves in over the run (the integrator's fluctuation, which any other
                # trajectory has too: two undisturbed runs once ended 2e-7 apart, so ten times
                # that was tighter than the fluctuation a diverged trajectory shows, 8e-6).
                spread_total = max(differ(again, ref, ("total",)), 1e-9)
                band = max(ref["band"], again["band"])
                worst = differ(got, ref, ("total",))
                finite = all(math.isfinite(v) for v in got.values())
                if worst > max(10 * spread_total, band) or not finite:
                    sys.exit(f"FAILED: stopped and continued: total energy {got['total']!r} vs "
                             f"undisturbed {ref['total']!r} and {again['total']!r}")
                print(f"ok: rank {paused} stopped for {TIMEOUT / 2:.1f} s and continued; the "
                      f"transport does not reproduce its own runs bit for bit (two undisturbed "
                      f"runs differ by {spread:.1e}), the continued run's total energy is "
                      f"within {worst:.1e} of theirs ({spread_total:.1e} between them, their total "
                      f"energy's band over the run {band:.1e})")
        if "kill" in only:  # the job ends
            rc, err, took, _ = signal_one(mpiexec, md, os.path.join(work, "kill.json"),
                                          killed, signal.SIGKILL)
            if rc is None or rc == 0:
                sys.exit(f"FAILED: SIGKILL of rank {killed}: rc {rc} after {took:.1f} s\n{err}")
            print(f"ok: SIGKILL of rank {killed} ended the job in {took:.1f} s (rc {rc})")
            if "gpu" in EXTRA:
                wait_for_free_gpu(md)


def signal_one(mpiexec, md, json_path, rank, sig, run=None, delay=2.0):
    """Starts a long job, sends `sig` to `rank` `delay` s into its steps; returns (rc, stderr,
    seconds until the job ended, seconds until a line named `rank` as the one waited for or
    None), rc None when it outlived the time-out + 10 s."""
    job, pids = start(mpiexec, md, 100000000, json_path, *([run] if run else []))
    time.sleep(delay)
    if job.poll() is not None:
        rc, out, err = job.finish(10)
        sys.exit(f"FAILED: the job ended (rc {rc}) before the signal:\n{out}\n{err}")
    os.kill(pids[rank], sig)
    at = time.time()
    named = None
    while job.poll() is None and time.time() < at + TIMEOUT + 10:
        if named is None and any(f"waiting for rank {rank}" in l for l in job.err):
            named = time.time() - at
        time.sleep(0.05)
    rc, _, err = job.finish(max(1, at + TIMEOUT + 10 - time.time()))
    took = time.time() - at
    if named is None and f"waiting for rank {rank}" in err:
        named = took
    kill_all(pids)
    return rc, err, took, named


def wait_for_free_gpu(md):
    """Under MPS the server frees a killed client's context some time after the process is
    gone (more than 10 s after an NVSHMEM job on the H200): until then a new client finds the
    device "busy or unavailable". Waits until a one-step GPU run starts, so that the next
    test does not meet it."""
    began = time.time()
    while time.time() - began < 120:
        probe = subprocess.run([md, "--device", "gpu", "--cells", "4", "--steps", "1", "--quiet"],
                               env=ENV, capture_output=True, text=True)
        if probe.returncode == 0:
            print(f"ok: the GPU takes a new job again {time.time() - began:.1f} s after the kill")
            return
        time.sleep(2)
    sys.exit(f"FAILED: the GPU refused new jobs for 120 s after the kill:\n{probe.stderr}")


def kill_all(pids):
    """Kills what is left of a job and waits until its processes are gone (under MPS the
    server then frees their contexts; a job started before that may find the GPU busy)."""
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids.values()):
        time.sleep(0.1)


if __name__ == "__main__":
    main()
