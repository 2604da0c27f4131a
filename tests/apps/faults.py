#!/usr/bin/env python3
"""Fault injection with real MPI ranks (halox-md on the CPU, 4 ranks, host transport): a rank
stopped with SIGSTOP makes its peers end the job within the exchange time-out + 10 s, naming
it; a rank killed with SIGKILL ends the job; a rank stopped and continued within the
time-out changes nothing (the result equals an undisturbed run's).

The run has no neighbour searches and thermo output only at its ends (--nstlist and
--thermo 0), so that between its first and last steps its ranks only exchange halos.

usage: faults.py MPIEXEC HALOX_MD
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
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


def start(mpiexec, md, steps, json_path):
    args = [mpiexec, "-n", "4", "--oversubscribe", "-x", "HALOX_FAULT_JOB", md, "--device",
            "cpu", "--cells", "6", "--steps", str(steps), "--nstlist", "100000000", "--thermo",
            "0", "--quiet", "--json", json_path]
    # The launcher's pid tags its ranks: set after fork, so use a placeholder and re-export.
    p = subprocess.Popen(["sh", "-c", 'HALOX_FAULT_JOB=$$ exec "$@"', "sh"] + args, env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        pids = rank_pids(p, os.path.basename(md))
        if len(pids) == 4:
            return p, pids
        time.sleep(0.1)
    p.kill()
    sys.exit("FAILED: the 4 ranks did not start")


def finish(p, limit):
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err
    return p.returncode, out, err


def main():
    mpiexec, md = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as work:
        ref_json = os.path.join(work, "ref.json")
        p, _ = start(mpiexec, md, 1500, ref_json)
        rc, out, err = finish(p, 300)
        if rc != 0:
            sys.exit(f"FAILED: the undisturbed run: rc {rc}\n{out}\n{err}")
        with open(ref_json) as f:
            ref = json.load(f)["thermo"][-1]

        # 1. SIGSTOP of rank 2: the job ends within the time-out + 10 s, rank 2 named.
        p, pids = start(mpiexec, md, 100000000, os.path.join(work, "stop.json"))
        time.sleep(2)
        os.kill(pids[2], signal.SIGSTOP)
        stopped = time.time()
        rc, out, err = finish(p, TIMEOUT + 10)
        took = time.time() - stopped
        os.kill(pids[2], signal.SIGKILL) if os.path.exists(f"/proc/{pids[2]}") else None
        if rc is None or rc == 0 or "waiting for rank 2" not in err:
            sys.exit(f"FAILED: SIGSTOP of rank 2: rc {rc} after {took:.1f} s\n{err}")
        line = next(l for l in err.splitlines() if "waiting for rank 2" in l)
        print(f"ok: SIGSTOP of rank 2 ended the job in {took:.1f} s (rc {rc}):\n    {line}")

        # 2. SIGKILL of rank 1: the job ends.
        p, pids = start(mpiexec, md, 100000000, os.path.join(work, "kill.json"))
        time.sleep(2)
        os.kill(pids[1], signal.SIGKILL)
        killed = time.time()
        rc, out, err = finish(p, TIMEOUT + 10)
        took = time.time() - killed
        if rc is None or rc == 0:
            sys.exit(f"FAILED: SIGKILL of rank 1: rc {rc} after {took:.1f} s\n{err}")
        print(f"ok: SIGKILL of rank 1 ended the job in {took:.1f} s (rc {rc})")

        # 3. SIGSTOP, then SIGCONT within the time-out: the same result as undisturbed.
        cont_json = os.path.join(work, "cont.json")
        p, pids = start(mpiexec, md, 1500, cont_json)
        time.sleep(0.5)
        os.kill(pids[3], signal.SIGSTOP)
        time.sleep(TIMEOUT / 2)
        os.kill(pids[3], signal.SIGCONT)
        rc, out, err = finish(p, 300)
        if rc != 0:
            sys.exit(f"FAILED: stopped and continued within the time-out: rc {rc}\n{err}")
        with open(cont_json) as f:
            got = json.load(f)["thermo"][-1]
        if got != ref:
            sys.exit(f"FAILED: stopped and continued: {got} != undisturbed {ref}")
        print(f"ok: rank 3 stopped for {TIMEOUT / 2:.1f} s and continued: the same final thermo "
              f"as the undisturbed run (step {got['step']}, total {got['total']:.10f})")


if __name__ == "__main__":
    main()
