#!/usr/bin/env bash
# The git-ignored folders a device call carries, made on this machine (a new checkout has none):
#   .deps/   GoogleTest, nlohmann/json and CLI11, which the GPU image lacks (after scripts/setup.sh)
#   .ab-api/ a baseline tree for scripts/device/diag/api_ab.sh        (with --baseline SHA)
#   .osu/src the OSU micro-benchmarks 7.4, built by scripts/osu-build.sh (with --osu SOURCE_DIR,
#            an unpacked copy of their public sources; their code never enters the project)
#   scripts/device/carry.sh [--baseline SHA] [--osu SOURCE_DIR]
# Then: run(..., carry=[".deps", ".ab-api", ".osu"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
baseline="" osu=""
while [ $# -gt 0 ]; do
  case $1 in
    --baseline) baseline=${2:?--baseline SHA}; shift 2 ;;
    --osu) osu=${2:?--osu SOURCE_DIR}; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0" | cut -c3-; exit 0 ;;
    *) echo "carry.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for need in /usr/src/googletest /usr/include/nlohmann /usr/include/CLI; do
  [ -e "$need" ] || { echo "carry.sh: no $need: run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf .deps/googletest .deps/nlohmann_json .deps/CLI11
mkdir -p .deps/scratch .deps/nlohmann_json/include .deps/CLI11/include
cp -r /usr/src/googletest .deps/
cp -r /usr/include/nlohmann .deps/nlohmann_json/include/
cp -r /usr/include/CLI .deps/CLI11/include/
echo "carry.sh: .deps ready ($(du -sh .deps | cut -f1))"
if [ -n "$baseline" ]; then
  rm -rf .ab-api && mkdir .ab-api && git archive "$baseline" | tar -x -C .ab-api
  echo "carry.sh: .ab-api holds $baseline"
fi
if [ -n "$osu" ]; then
  rm -rf .osu && mkdir -p .osu/src && cp -r "$osu"/. .osu/src/
  scripts/osu-build.sh .osu/src
fi
