#!/usr/bin/env python3
"""A rank that stalls anywhere in a run is named by the ranks that wait for it: halox-md on
the CPU (4 ranks, host transport) with a neighbour search and a thermo reduction every step,
one rank stopped (1) by a preloaded fault injector (tests/fault/stop_at.cpp) at the N-th call
of a chosen MPI function, which reaches each kind of wait deterministically: the migration's
and the plan builder's messages, their agreement collectives, the thermo reduction, the
summary's reduction, MPI_Finalize; and (2) by SIGSTOP at random moments (seed printed).
Each must end in a time-out naming the stopped rank within the time-out + 3 s of the stop
and the job must end within a minute. A rank stalled inside MPI_Finalize cannot be named
(no wait outside MPI reaches it): the watchdog ends the job there (exit code 4).

usage: stalls.py MPIEXEC HALOX_MD STOP_AT_LIBRARY [--random N] [--lbm HALOX_LBM]
--lbm: also halox-lbm stopped in the barrier after its warm-up (its programs' collective).
"""
import os
import random
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import Job, kill_all, rank_pids  # noqa: E402

TIMEOUT = 5.0  # halox-md's exchange time-out, which its searches and reductions take too
JOB_LIMIT = 60.0
RUN = ["--device", "cpu", "--cells", "8", "--nstlist", "1", "--thermo", "1", "--quiet"]


def named(line, rank):
    """The line names `rank` as the one waited for ("waiting for rank 2", "for ranks 1, 2
    and 3", or the root of a roll call that did not answer), or, inside MPI_Finalize (which
    nothing outside it can bound or ask), the watchdog ends the job there."""
    if "no progress" in line and "in MPI_Finalize" in line:
        return True
    m = re.search(r"waiting for ranks? ([0-9, and]+)", line)
    return bool(m) and str(rank) in re.findall(r"\d+", m.group(1))


def watch(job, rank, stopped_at, limit):
    """Seconds from the stop until a line named `rank` (None: none did), and the job's rc."""
    seen = None
    end = time.time() + JOB_LIMIT
    while time.time() < end and job.poll() is None:
        if seen is None and any(named(l, rank) for l in job.err):
            seen = time.time() - stopped_at()
        time.sleep(0.05)
    rc, out, err = job.finish(max(1, end - time.time()))
    if seen is None and any(named(l, rank) for l in err.splitlines()):
        seen = time.time() - stopped_at()  # printed at the very end: an upper bound
    return seen, rc, out, err


# More ranks than cores: the waiting ranks, the stopped one's peers and the launcher share
# them, and a time-out's line reaches the launcher's output later (seen 8 s late once on 2
# cores). The bound stays the time-out + 3 s where every rank has a core.
SLACK = 0.0 if (os.cpu_count() or 1) >= 4 else 5.0


def check(case, seen, rc, err, limit, took):
    limit += SLACK
    if rc is None:
        sys.exit(f"FAILED: {case}: the job outlived {JOB_LIMIT:.0f} s\n{err}")
    if rc == 0:
        sys.exit(f"FAILED: {case}: rc 0\n{err}")
    if seen is None or seen > limit:
        sys.exit(f"FAILED: {case}: the stopped rank was {'not named' if seen is None else f'named after {seen:.1f} s'} "
                 f"(limit {limit:.1f} s), rc {rc}\n{err}")
    line = next((l for l in err.splitlines() if "waiting for" in l), "").strip()
    print(f"ok: {case}: named after {seen:.1f} s (limit {limit:.1f}), job ended in {took:.1f} s, "
          f"rc {rc}\n    {line[:200]}")


def injected(mpiexec, md, library, call, at, rank, steps, limit, run=None):
    env_names = ["LD_PRELOAD", "HALOX_STOP_RANK", "HALOX_STOP_CALL", "HALOX_STOP_AT",
                 "HALOX_FAULT_JOB"]
    os.environ.update(LD_PRELOAD=library, HALOX_STOP_RANK=str(rank), HALOX_STOP_CALL=call,
                      HALOX_STOP_AT=str(at))
    args = [mpiexec, "-n", "4", "--oversubscribe"] + sum((["-x", n] for n in env_names), []) + [
        md] + (run or RUN) + ["--steps", str(steps)]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for n in env_names:
        os.environ.pop(n, None)
    start = time.time()
    job = Job(["sh", "-c", 'HALOX_FAULT_JOB=$$ exec "$@"', "sh"] + args, env=env)
    marks = []

    def stopped_at():
        if not marks:
            for l in job.err:
                if l.startswith("halox-stop-at:"):
                    marks.append(time.time())
                    break
        return marks[0] if marks else start

    # Wait for the injector's line, so that the time counts from the stop.
    while time.time() < start + JOB_LIMIT and job.poll() is None and not marks:
        stopped_at()
        time.sleep(0.02)
    seen, rc, out, err = watch(job, rank, stopped_at, limit)
    kill_all(rank_pids(job, os.path.basename(md)))
    case = f"rank {rank} stopped at call {at} of {call}"
    if "halox-stop-at:" not in err:
        sys.exit(f"FAILED: {case}: the injector never stopped it (rc {rc})\n{out}\n{err}")
    check(case, seen, rc, err, limit, time.time() - start)


def main():
    mpiexec, md, library = sys.argv[1:4]
    rest = sys.argv[4:]
    randoms = int(rest[rest.index("--random") + 1]) if "--random" in rest else 3
    lbm = rest[rest.index("--lbm") + 1] if "--lbm" in rest else None
    long_run = 100000000
    # Each wait of a run with a search every step, reached by the N-th call of the function
    # that enters it (counts from a run of this configuration: about 10 Iallreduce, 50 Isend
    # and 1 Iallgather per step after a set-up of a few dozen calls).
    for call, at, rank in [("MPI_Iallreduce", 200, 2),  # the search's agreement collectives
                           ("MPI_Iallreduce", 203, 0),  # the roll call's root stopped
                           ("MPI_Iallreduce", 205, 3),
                           ("MPI_Isend", 900, 2),       # migration, plan build, exchange
                           ("MPI_Isend", 911, 1),
                           ("MPI_Irecv", 1500, 2),
                           ("MPI_Iallgather", 30, 2)]:  # validate_plan's peers
        injected(mpiexec, md, library, call, at, rank, long_run, TIMEOUT + 3)
    # The summary's reduction and MPI_Finalize, after a short run (the programs' collectives
    # wait 30 s, as does the watchdog of MPI_Finalize).
    injected(mpiexec, md, library, "MPI_Ireduce", 1, 2, 20, 20 + 3)
    injected(mpiexec, md, library, "MPI_Finalize", 1, 2, 20, 30 + 3)
    # halox-lbm stopped before the barrier after its warm-up (the programs' collectives wait
    # 20 s, then name it).
    if lbm:
        injected(mpiexec, lbm, library, "MPI_Ibarrier", 1, 2, 40, 20 + 3,
                 ["--device", "cpu", "--model", "bgk", "--grid", "16x16x16", "--warmup", "20"])
    # SIGSTOP at random moments of a run with a search every step.
    seed = int(os.environ.get("HALOX_TEST_SEED", random.randrange(1 << 30)))
    print(f"[seed] stalls.py: HALOX_TEST_SEED={seed}")
    rng = random.Random(seed)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for k in range(randoms):
        rank = rng.randrange(4)
        delay = rng.uniform(2.0, 4.0)
        args = [mpiexec, "-n", "4", "--oversubscribe", "-x", "HALOX_FAULT_JOB", md] + RUN + [
            "--steps", str(long_run)]
        job = Job(["sh", "-c", 'HALOX_FAULT_JOB=$$ exec "$@"', "sh"] + args, env=env)
        pids = {}
        end = time.time() + 60
        while len(pids) < 4 and time.time() < end:
            pids = rank_pids(job, os.path.basename(md))
            time.sleep(0.1)
        time.sleep(delay)
        os.kill(pids[rank], signal.SIGSTOP)
        at = time.time()
        seen, rc, out, err = watch(job, rank, lambda: at, TIMEOUT + 3)
        kill_all(pids)
        check(f"SIGSTOP of rank {rank} {delay:.2f} s after start", seen, rc, err, TIMEOUT + 3,
              time.time() - at)


if __name__ == "__main__":
    main()
