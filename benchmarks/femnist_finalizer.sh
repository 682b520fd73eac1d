#!/usr/bin/env bash
# Wait for one unit of FedHDP's FEMNIST paper grid (one training, three λ: three cache entries) to land in
# figures/aldaghri_fedhdp/cache while benchmarks/cpu_background.sh computes it, then remove the runner's untracked
# progress.json, bump the README and GPU_QUEUE counts of cached units from N − 1 to N (tests/test_readme.py ties them to
# the cache), run that test and commit the six files with the two documents (nothing else staged is committed):
#   setsid nohup bash benchmarks/femnist_finalizer.sh N HASH1 HASH2 HASH3 > /tmp/finalize.out 2>&1 < /dev/null &
# HASHes: the unit's runs as `--list` names them (FedHDPRun-<hash>); its log is /tmp/finalize.log. It looks every 15 s.
# FIGURES=1 then regenerates the notebook from the caches (`make aldaghri_fedhdp RESULTS_ONLY=1`, ≈ 25 s) and commits
# figures/aldaghri_fedhdp and figures/REPORT.md too, for a unit that lands minutes before a session ends.
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: femnist_finalizer.sh N HASH1 HASH2 HASH3 (N: 1 to 8)" >&2; exit 2; }
n=$1; shift
cd "$(dirname "$0")/.."
c=figures/aldaghri_fedhdp/cache
while :; do
  ok=1; for h in "$@"; do [ -f $c/FedHDPRun-$h.pkl ] && [ -f $c/FedHDPRun-$h.json ] || ok=0; done
  [ $ok = 1 ] && break; sleep 15
done
sleep 10
rm -f $c/progress.json
prev=$((n-1))
sed -i "s/$prev of them cached/$n of them cached/; s/$prev of its 8 shared trainings cached/$n of its 8 shared trainings cached/" README.md
sed -i "s/so a GPU's; $prev of/so a GPU's; $n of/" benchmarks/GPU_QUEUE.md
export DPFL_DATA=${DPFL_DATA:-../shared/data}
if PYTHONPATH=lib .venv/bin/python -m pytest -q -x tests/test_readme.py -k femnist_units >> /tmp/finalize.log 2>&1; then
  files=(); for h in "$@"; do files+=($c/FedHDPRun-$h.pkl $c/FedHDPRun-$h.json); done
  git add "${files[@]}" README.md benchmarks/GPU_QUEUE.md
  git commit -q -m "FedHDP FEMNIST paper grid: unit $n of 8 cached on the CPU at η_p = 0.02 ($*); README/GPU_QUEUE count $n" -- "${files[@]}" README.md benchmarks/GPU_QUEUE.md >> /tmp/finalize.log 2>&1
  echo "committed unit $n at $(date)" >> /tmp/finalize.log
  if [ "${FIGURES:-0}" = 1 ] && make aldaghri_fedhdp RESULTS_ONLY=1 >> /tmp/finalize.log 2>&1; then
    figs=(figures/aldaghri_fedhdp ":(exclude)$c" figures/REPORT.md)     # the cache: the unit's files are committed
    git add -A -- "${figs[@]}"
    git commit -q -m "FedHDP: figures regenerated from the caches (RESULTS_ONLY) with unit $n of the FEMNIST grid" \
      -- "${figs[@]}" >> /tmp/finalize.log 2>&1
    echo "figures committed at $(date)" >> /tmp/finalize.log
  fi
else
  echo "count test failed at $(date)" >> /tmp/finalize.log
fi
