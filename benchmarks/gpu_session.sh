#!/usr/bin/env bash
# One GPU call (benchmarks/GPU_QUEUE.md): CUDA tests, then Zheng's cells until the budget.
#   bash benchmarks/gpu_session.sh TESTS_SECONDS TOTAL_SECONDS [ROUTE] [ONLY]
# TESTS_SECONDS: at most this long for the CUDA tests in $DPFL_GPU_TESTS (0: none; -v, so that a run cut short
# by the timeout still names each test that finished); TOTAL_SECONDS: the
# call's whole budget, the cells get what the tests leave; ROUTE: --per-sample for the cells, "ghost"
# (default), "unfold", "grouped", "matmul" or "auto" (benchmarks/route.py measures the four, ≈ 20 s, and picks CIFAR-10's
# route when ONLY names cifar10, MNIST's otherwise, at the clients a round of ONLY's p holds; a later call on the warm
# machine reuses it); ONLY: --only for the cells.
# The cells run with CUDA graphs (DPFL_CUDA_GRAPHS=1) only if the tests ran and tests/test_cuda_graphs.py passed on the GPU.
# Finished runs are also kept in /tmp/keep and checkpoints in /tmp/ckpt, so that a next call on the same
# warm machine goes on from them. First used on 2026-11-26 (benchmarks/gpu/2026-11-26/README.md).
# DPFL_GPU_PROFILE=1: profile every per-sample route after the tests (profile_routes.txt / .json come back).
# DPFL_GPU_DEVICE=cpu (with a python3 that has dpfl's needs, and an nvidia-smi, on PATH) dry-runs it on a CPU.
T0=$SECONDS
TESTS=${1:-300}; TOTAL=${2:-575}; ROUTE=${3:-ghost}; ONLY=${4:-}
DEV=${DPFL_GPU_DEVICE:-cuda}
TEST_FILES=${DPFL_GPU_TESTS:-tests/test_cuda_graphs.py tests/test_local.py tests/test_loop.py tests/test_fedhdp_engine.py tests/test_zheng_experiment.py tests/test_geyer.py tests/test_notebooks.py}
if [ "$DEV" = cuda ]; then           # the wheels the GPU image lacks (benchmarks/gpu_wheels.py); a CPU has its venv
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    2> $OUT/device.txt || exit 1
fi
export PYTHONPATH=$PWD/lib:/tmp/site DPFL_DATA=$PWD/.devdata PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $OUT/device.txt
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" >> $OUT/device.txt
if [ "$TESTS" -gt 0 ]; then
  DPFL_TEST_DEVICE=$DEV timeout "$TESTS" python3 -m pytest -v -n 4 -p no:cacheprovider $TEST_FILES -k "not aldaghri" \
    > $OUT/cuda-tests.log 2>&1
  echo "pytest rc=$? after $((SECONDS - T0)) s" >> $OUT/cuda-tests.log
fi
# The cells replay their local steps as CUDA graphs only where this call's tests showed the graphs giving the eager
# bits on this GPU (all 4 cases of tests/test_cuda_graphs.py passed; lib/dpfl/federated/graphs.py)
if [ "$(grep -c 'PASSED tests/test_cuda_graphs.py::test_cuda_graphs_give_the_eager_bits' $OUT/cuda-tests.log 2>/dev/null)" = 4 ]; then
  export DPFL_CUDA_GRAPHS=1; echo "CUDA graphs on (tests/test_cuda_graphs.py passed)" >> $OUT/zheng.log
fi
if [ -n "$DPFL_GPU_PROFILE" ]; then    # where a round's time goes with each route (benchmarks/profile_routes.py)
  timeout 120 python3 benchmarks/profile_routes.py --out $OUT >> $OUT/cuda-tests.log 2>&1   # 8 files at most come back
  echo "profile rc=$? after $((SECONDS - T0)) s" >> $OUT/cuda-tests.log
fi
case "$ONLY" in *cifar10*) FOR=cifar10 ;; *) FOR=mnist ;; esac
case "$ONLY" in *p=0.25*) CLIENTS=25 ;; *p=0.5*) CLIENTS=50 ;; *) CLIENTS=100 ;; esac   # a round's expected clients
if [ "$ROUTE" = auto ] && [ -s /tmp/route-$FOR ]; then     # measured by an earlier call on this warm machine
  ROUTE=$(cat /tmp/route-$FOR); echo "route $ROUTE (measured by an earlier call)" >> $OUT/zheng.log
elif [ "$ROUTE" = auto ]; then
  ROUTE=$(python3 benchmarks/route.py --for $FOR --clients $CLIENTS --out $OUT 2>> $OUT/zheng.log | tail -1)
  case "$ROUTE" in ghost|unfold|grouped|matmul) echo "$ROUTE" > /tmp/route-$FOR ;;
    *) echo "route.py failed: the default route" >> $OUT/zheng.log; ROUTE=ghost ;; esac
  echo "route $ROUTE after $((SECONDS - T0)) s" >> $OUT/zheng.log
fi
mkdir -p /tmp/keep /tmp/ckpt && cp -n /tmp/keep/* figures/zheng2021/cache/ 2>/dev/null
B=$((TOTAL - SECONDS + T0))
if [ "$B" -lt 30 ]; then echo "no time left for the cells ($B s)" >> $OUT/zheng.log; exit 0; fi
echo "zheng cells budget $B s, --per-sample $ROUTE, --only '$ONLY'" >> $OUT/zheng.log
DPFL_CACHE=/tmp/dpflcache timeout $((B + 25)) python3 -m dpfl.experiments.zheng2021 --profile cells --device $DEV \
  --data-dir .devdata --budget "$B" --checkpoints /tmp/ckpt --per-sample "$ROUTE" --only "$ONLY" \
  --bundle $OUT/zheng-cells.tar.gz 2>&1 | tr '\r' '\n' | grep -v "rounds:" >> $OUT/zheng.log
echo "zheng rc=${PIPESTATUS[0]} after $((SECONDS - T0)) s" >> $OUT/zheng.log
cp figures/zheng2021/cache/ZhengRun-* /tmp/keep/ 2>/dev/null
cp figures/zheng2021/cache/progress.json $OUT/ 2>/dev/null
ls -la /tmp/ckpt >> $OUT/zheng.log
