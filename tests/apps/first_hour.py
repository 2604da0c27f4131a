#!/usr/bin/env python3
"""What a new user meets in the first hour, on a CPU machine: an output path that cannot be
written is refused before the run, once, with exit 2 (also under mpirun); --help, --version
and errors are printed once under mpirun; an unknown halox-bench command is named; an
unusable tuning file is reported, not a crash; a blown-up MD run ends with exit 3; the LBM's
mass check passes in float and names what failed; every JSON file records the halox version
and its command line, and null (not 0) for what the run did not measure. Exit codes:
docs/reliability.md.

usage: first_hour.py MPIEXEC HALOX_MD HALOX_LBM HALOX_INFO HALOX_BENCH
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TIMEOUT = 120  # far above any of these runs: reaching it is a hang


def run(cmd, env=None, ranks=0):
    full = ([MPIEXEC, "-n", str(ranks), "--oversubscribe"] if ranks else []) + cmd
    start = time.monotonic()
    try:
        p = subprocess.run(full, env=env or ENV, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED (hang, killed after {TIMEOUT} s): {' '.join(full)}")
    return full, p, time.monotonic() - start


def expect(cmd, rc, words, ranks=0, once=True, env=None, stream="stderr", banned=()):
    full, p, seconds = run(cmd, env, ranks)
    text = getattr(p, stream)
    problems = []
    if p.returncode != rc:
        problems.append(f"rc {p.returncode}, want {rc}")
    count = text.count(words)
    if count == 0 or (once and count > 1):
        problems.append(f"'{words}' {count} times in {stream}, want {'once' if once else '>= 1'}")
    for word in ("terminate called", "Backtrace", "Traceback", "MPI_ABORT", "ORTE_ERROR_LOG") + banned:
        if word in p.stdout + p.stderr:
            problems.append(f"'{word}' in the output")
    if problems:
        sys.exit(f"FAILED: {' '.join(full)}: {'; '.join(problems)}\nstdout:\n{p.stdout}\n"
                 f"stderr:\n{p.stderr}")
    print(f"ok (rc {p.returncode}, {seconds:.1f} s): {' '.join(full)}")
    return p


def main():
    global MPIEXEC
    MPIEXEC, md, lbm, info, bench = sys.argv[1:6]
    md_cpu = [md, "--device", "cpu", "--cells", "4", "--steps", "20", "--quiet"]
    lbm_cpu = [lbm, "--device", "cpu", "--model", "bgk", "--grid", "16x16x16", "--steps", "4"]
    missing = "/nonexistent-halox-folder/out.json"
    # Unwritable outputs: refused before the run, once, exit 2, in one process and under mpirun.
    for ranks in (0, 1, 2):
        for option in ("--json", "--trace", "--dump-forces"):
            expect(md_cpu + [option, missing], 2, f"{option}: cannot write {missing}", ranks)
        for option in ("--json", "--trace", "--dump", "--slice"):
            expect(lbm_cpu + [option, missing], 2, f"{option}: cannot write {missing}", ranks)
        expect([info, "--json", missing], 2, f"--json: cannot write {missing}", ranks)
    expect([bench, "pack", "--device", "cpu", "--quick", "--json", missing], 2, "cannot write")
    with tempfile.TemporaryDirectory() as folder:
        expect(md_cpu + ["--json", folder], 2, "it is a folder")
    # Help, version and errors once under mpirun; the subcommands named.
    for cmd in ([bench, "--help"], [bench, "pack", "--version"], [bench, "halo", "--help"],
                [md, "--version"], [lbm, "--help"], [info, "--help"]):
        expect(cmd, 0, "--version" if "--help" in cmd else "(halox)", 2, stream="stdout")
    expect([bench, "foo", "--help"], 2, "unknown command 'foo'", 2)
    expect([bench, "pack", "--n", "3"], 2, "--n: '3' is outside", 2)
    # Two programs in one job (MPMD): told at once, not a 300 s wait.
    full = [MPIEXEC, "--oversubscribe", "-n", "1"] + md_cpu + [":", "-n", "1"] + lbm_cpu
    start = time.monotonic()
    p = subprocess.run(full, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 2 or "the ranks run different programs" not in p.stderr:
        sys.exit(f"FAILED: {' '.join(full)}: rc {p.returncode}\n{p.stderr}")
    print(f"ok (rc 2, {time.monotonic() - start:.1f} s): two programs in one job")
    # Grid and number options take only what they say: a lattice of three sizes, decimal.
    expect([lbm, "--grid", "16x16"], 2, "--grid: '16x16' is not of the form NxMxK")
    expect([md, "--cells", "0x10"], 2, "--cells: '0x10' is not a number")
    expect([md, "--cells", " 10"], 2, "--cells: ' 10' is not a number")
    expect([md, "--ranks", "2xx"], 2, "--ranks: '2xx' is not of the form")
    # Memory: the node's processes together, and the LBM's lattice (once killed unannounced).
    # halox-md needs about 400 bytes per atom (4 per cell^3) in all, split over the processes:
    # cells whose share fits one process's check but not the node's four together.
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    cells = int((memory / 800) ** (1 / 3))
    expect([md, "--device", "cpu", "--cells", str(cells)], 2, "for the 4 processes on this node",
           4)
    expect([lbm, "--device", "cpu", "--grid", "3000x3000x3000"], 2, "GB, more than this node")
    # An unusable tuning file: reported by halox-info, which still prints the rest.
    with tempfile.NamedTemporaryFile("w", suffix=".json") as bad:
        bad.write('{"chunk_bytes": ')
        bad.flush()
        expect([info], 0, "unusable: halox: the tuning file", 0,
               env=dict(ENV, HALOX_TUNING_FILE=bad.name), stream="stdout")
    # A blown-up run: a clear error and exit 3, in one process and on 4 ranks, also when it
    # diverges after the last neighbour search.
    expect([md, "--device", "cpu", "--cells", "4", "--steps", "20", "--dt", "0.1"], 3,
           "the run diverged")
    expect([md, "--device", "cpu", "--steps", "9", "--dt", "0.1"], 3, "the run diverged", 4,
           banned=("ranks' states",))
    # The LBM's mass check at the default (float) precision, and a failing check named.
    expect(lbm_cpu[:-4] + ["--grid", "24x24x24", "--steps", "10", "--check-mass"], 0,
           "conservation", stream="stdout")
    expect(lbm_cpu + ["--precision", "double", "--check-mass", "--init", "taylor-green",
                      "--check-taylor-green", "--tau", "0.51"], 1,
           "CHECK FAILED: --check-taylor-green", stream="stdout")
    # The plotting and trace tools: a missing, broken or foreign file is one line and exit 2.
    scripts = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
    plot, summary = os.path.join(scripts, "plot"), os.path.join(scripts, "trace-summary")
    with tempfile.TemporaryDirectory() as folder:
        broken, foreign = f"{folder}/broken.json", f"{folder}/foreign.json"
        open(broken, "w").write('{"app": "halox-md", ')
        open(foreign, "w").write('{"app": "halox-lbm"}')
        for tool, name in ((plot, "plot"), (summary, "trace-summary")):
            out = [] if tool == summary else ["-o", f"{folder}/x.png"]
            expect([sys.executable, tool, missing] + out, 2, f"{name}: cannot read {missing}")
            expect([sys.executable, tool, broken] + out, 2, "is not valid JSON")
            expect([sys.executable, tool, foreign] + out, 2, f"{name}: ")
    # JSON: version and command line in every file; null for what was not measured.
    with tempfile.TemporaryDirectory() as folder:
        files = {
            "md": md_cpu + ["--json", f"{folder}/md.json"],
            "lbm": lbm_cpu + ["--init", "uniform", "--json", f"{folder}/lbm.json"],
            "info": [info, "--json", f"{folder}/info.json"],
            "pack": [bench, "pack", "--device", "cpu", "--quick", "--json", f"{folder}/pack.json"],
        }
        for name, cmd in files.items():
            full, p, _ = run(cmd)
            if p.returncode != 0:
                sys.exit(f"FAILED: {' '.join(full)}: rc {p.returncode}\n{p.stderr}")
            data = json.load(open(f"{folder}/{name}.json"))
            if data.get("halox_version") is None or data.get("command_line") != " ".join(cmd):
                sys.exit(f"FAILED: {name}.json: halox_version {data.get('halox_version')!r}, "
                         f"command_line {data.get('command_line')!r}, want {' '.join(cmd)!r}")
            print(f"ok: {name}.json records halox {data['halox_version']} and its command line")
        lbm_json = json.load(open(f"{folder}/lbm.json"))
        if lbm_json["taylor_green_error"] is not None:
            sys.exit(f"FAILED: lbm.json: taylor_green_error {lbm_json['taylor_green_error']} "
                     "for a run without Taylor-Green")
        print("ok: lbm.json has null for the Taylor-Green error of a run that did not measure it")
        # A failed write leaves the old file whole (written to a temporary, then renamed).
        old = open(f"{folder}/md.json").read()
        os.chmod(folder, 0o500)
        try:
            if os.geteuid() != 0:  # root writes anyway
                expect(md_cpu + ["--json", f"{folder}/md.json"], 2, "cannot write")
        finally:
            os.chmod(folder, 0o700)
        if open(f"{folder}/md.json").read() != old:
            sys.exit("FAILED: md.json changed by a refused run")


if __name__ == "__main__":
    main()
