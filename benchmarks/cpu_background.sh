#!/usr/bin/env bash
# Run one paper-scale cell on this machine's CPU in the background, at the lowest priority, resumable from its
# checkpoint (benchmarks/GPU_QUEUE.md, "CPU fallback"):
#   bash benchmarks/cpu_background.sh "mnist p=0.5 σ=0.75 B=8" 10200 [LOG]
# Under the kernel's autogroup scheduling `nice` ranks a process only within its session, so the run gets a
# session of its own and sets that session's autogroup to nice 19 from inside it. Setting it from outside
# (`setsid … & echo 19 > /proc/$!/autogroup`) races setsid(): on 2026-11-27 the echo landed first and
# lowered the calling shell's session instead, so the tests ran at nice 19 beside a cell at nice 0.
set -euo pipefail
only=${1:?usage: cpu_background.sh ONLY SECONDS [LOG]}
budget=${2:?usage: cpu_background.sh ONLY SECONDS [LOG]}
log=${3:-/tmp/zheng-cpu.log}
cd "$(dirname "$0")/.."
export PYTHONPATH=lib DPFL_DATA=${DPFL_DATA:-../shared/data}
setsid nohup bash -c 'echo 19 > /proc/self/autogroup && exec nice -n 19 .venv/bin/python -m dpfl.experiments.zheng2021 \
    --profile cells --device cpu --only "$0" --budget "$1"' "$only" "$budget" > "$log" 2>&1 < /dev/null &
sleep 2
pid=$(pgrep -n -f "dpfl.experiments.zheng2021 --profile cells --device cpu --only $only") || { cat "$log"; exit 1; }
echo "pid $pid ($(cat /proc/$pid/autogroup)); this shell: $(cat /proc/$$/autogroup); log $log"
