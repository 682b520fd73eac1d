#!/usr/bin/env bash
# One GPU call of 2026-11-26 (GPU_QUEUE items 1 and 3): CUDA tests, then Zheng cells until the budget.
# Usage on the device: bash benchmarks/gpu/2026-11-26/session.sh TESTS_SECONDS TOTAL_SECONDS
# Finished runs are also kept in /tmp/keep and checkpoints in /tmp/ckpt, so a next call on the same
# warm machine goes on from them.
T0=$SECONDS
TESTS=${1:-300}; TOTAL=${2:-575}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=lib:/tmp/site DPFL_DATA=.devdata PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/device.txt
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" >> $OUT/device.txt
if [ "$TESTS" -gt 0 ]; then
  DPFL_TEST_DEVICE=cuda timeout "$TESTS" python3 -m pytest -q -n 4 -p no:cacheprovider tests/test_local.py \
    tests/test_loop.py tests/test_zheng_experiment.py tests/test_geyer.py tests/test_notebooks.py -k "not aldaghri" \
    > $OUT/cuda-tests.log 2>&1
  echo "pytest rc=$? after $((SECONDS - T0)) s" >> $OUT/cuda-tests.log
fi
mkdir -p /tmp/keep /tmp/ckpt && cp -n /tmp/keep/* figures/zheng2021/cache/ 2>/dev/null
B=$((TOTAL - SECONDS + T0))
echo "zheng cells budget $B s" > $OUT/zheng.log
DPFL_CACHE=/tmp/dpflcache timeout $((B + 25)) python3 -m dpfl.experiments.zheng2021 --profile cells --device cuda \
  --data-dir .devdata --budget "$B" --checkpoints /tmp/ckpt --bundle $OUT/zheng-cells.tar.gz 2>&1 \
  | tr '\r' '\n' | grep -v "rounds:" >> $OUT/zheng.log
echo "zheng rc=${PIPESTATUS[0]} after $((SECONDS - T0)) s" >> $OUT/zheng.log
cp figures/zheng2021/cache/ZhengRun-* /tmp/keep/ 2>/dev/null
cp figures/zheng2021/cache/progress.json $OUT/ 2>/dev/null
ls -la /tmp/ckpt >> $OUT/zheng.log
