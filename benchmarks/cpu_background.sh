#!/usr/bin/env bash
# Run one paper-scale cell on this machine's CPU in the background, at the lowest priority, resumable from its
# checkpoint (benchmarks/GPU_QUEUE.md, "CPU fallback"):
#   bash benchmarks/cpu_background.sh "mnist p=0.5 σ=0.75 B=8" 10200 [LOG]
# Another paper's grid: EXPERIMENT (default zheng2021) names the module under dpfl.experiments and PROFILE its profile
# (default: zheng2021's "cells", else "paper"), e.g.
#   EXPERIMENT=aldaghri_fedhdp_fl bash benchmarks/cpu_background.sh "noniid_mnist" 10200 /tmp/fedhdp.log
# SEED (default 0) is the run's --seed, e.g. a cell at another seed (GPU_QUEUE item 7):
#   SEED=2 bash benchmarks/cpu_background.sh "mnist p=1 σ=0.75 B=16" 9000 /tmp/zheng-seed2.log
# Under the kernel's autogroup scheduling `nice` ranks a process only within its session, so the run gets a
# session of its own and sets that session's autogroup to nice 19 from inside it. Setting it from outside
# (`setsid … & echo 19 > /proc/$!/autogroup`) races setsid(): on 2026-11-27 the echo landed first and
# lowered the calling shell's session instead, so the tests ran at nice 19 beside a cell at nice 0.
# CHECKPOINTS (default ~/.cache/dpfl/checkpoints/EXPERIMENT) is where the unfinished run keeps its state: outside the
# checkout, because a session can be handed its predecessor's machine with a new checkout (2026-12-04 14:43: `uptime`
# 11 h 45 min and ~/.cache kept, but the checkout's ignored cache/checkpoints/ gone with a FEMNIST unit's 13 rounds).
# `--list` reads the same place with `--checkpoints "$HOME/.cache/dpfl/checkpoints/EXPERIMENT"`.
# To stop it early (e.g. to restart it with a later deadline): `pkill -TERM -f "dpfl.experiments.zheng2021 --profile cells"`;
# since 2026-12-02 the run finishes the round in progress, saves its checkpoint and exits 3 (wait for it to exit).
set -euo pipefail
only=${1:?usage: cpu_background.sh ONLY SECONDS [LOG]}
budget=${2:?usage: cpu_background.sh ONLY SECONDS [LOG]}
log=${3:-/tmp/zheng-cpu.log}
experiment=${EXPERIMENT:-zheng2021}
if [ "$experiment" = zheng2021 ]; then profile=${PROFILE:-cells}; else profile=${PROFILE:-paper}; fi
seed=${SEED:-0}
checkpoints=${CHECKPOINTS:-$HOME/.cache/dpfl/checkpoints/$experiment}
cd "$(dirname "$0")/.."
export PYTHONPATH=lib DPFL_DATA=${DPFL_DATA:-../shared/data}
setsid nohup bash -c 'echo 19 > /proc/self/autogroup && exec nice -n 19 .venv/bin/python -m "dpfl.experiments.$2" \
    --profile "$3" --device cpu --only "$0" --budget "$1" --seed "$4" --checkpoints "$5"' "$only" "$budget" "$experiment" "$profile" "$seed" "$checkpoints" \
    > "$log" 2>&1 < /dev/null &
sleep 2
pid=$(pgrep -n -f "dpfl.experiments.$experiment --profile $profile --device cpu --only $only") || { cat "$log"; exit 1; }
echo "pid $pid ($(cat /proc/$pid/autogroup)); this shell: $(cat /proc/$$/autogroup); log $log; checkpoints $checkpoints"
