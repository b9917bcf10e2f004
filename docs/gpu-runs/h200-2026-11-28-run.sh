#!/bin/bash
# Third lent-GPU session: build + cuda op tests (gpu_check), then in parallel
#  GPU (cores 0-7): linear_topk on cuda at the XC grid; the loop at p=312330 on cuda vs cpu;
#  CPU (cores 8-15): the dispatch levels' speed on this AVX-512 host against faiss / eager.
set -u
export PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ CC=/usr/bin/gcc
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/gc
PY=/opt/torch/.venv/bin/python
PWD_REPO=$(pwd)
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
{ date; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; lscpu | grep -E "Model name|^CPU\(s\)|L3";
  grep -o -w 'avx512f\|avx512bw\|avx512vl\|avx2\|fma' /proc/cpuinfo | sort | uniq -c; } > "$O/machine.txt" 2>&1
$PY -m pip install -q --no-index --no-deps .gpu/wheels/*.whl > "$O/faiss-install.txt" 2>&1
$PY -c "import faiss; print('faiss', faiss.__version__)" >> "$O/faiss-install.txt" 2>&1
el "gpu_check start" >> "$O/timeline.txt"
timeout 300 $PY tools/gpu_check.py --venv /opt/torch/.venv --out /tmp/gc/gpu-check.json --tests cuda --workers 6 \
  --no-compile-peers --benches topk --bench-timeout 25 --data-dir /tmp/nodata --mainjob-rounds 2 \
  --mainjob-only fedmlh-bibtex --mainjob-timeout 60 --test-timeout 90 > "$O/gpu-check.log" 2>&1 &
GC=$!
# wait for the build (registered.log is written right after the install), then pin gpu_check to cores 0-7
for i in $(seq 1 200); do [ -f /tmp/gc/registered.log ] && break; sleep 1; done
el "build done? $(ls /tmp/gc/registered.log 2>&1)" >> "$O/timeline.txt"
taskset -a -p -c 0-7 $GC > /dev/null 2>&1
cpu_levels() {   # one or two threads per bench, each pinned to its own cores of 8-15
  for isa in avx512 avx2; do
    FK_BENCH_NO_COMPILE=1 timeout 170 taskset -c 8,9 $PY bench/spread.py --only 20000,64 30000,128 --threads 1 --isa $isa \
      --out /tmp/gc/spread_small_$isa.json > "$O/spread_small_$isa.txt" 2>&1 &
    FK_BENCH_NO_COMPILE=1 timeout 170 taskset -c 10,11 $PY bench/spread.py --only 20000,512 --threads 1 --isa $isa \
      --out /tmp/gc/spread_512_$isa.json > "$O/spread_512_$isa.txt" 2>&1 &
    FK_BENCH_NO_COMPILE=1 timeout 170 taskset -c 12,13 $PY bench/topk.py --only 312330,512,256 --threads 1 --isa $isa \
      --repeat 5 --out /tmp/gc/topk_cpu_$isa.json > "$O/topk_cpu_$isa.txt" 2>&1 &
    timeout 170 taskset -c 14,15 $PY bench/sampled.py --parts lce --lce-sizes 2048x65536 --isa $isa \
      --out /tmp/gc/sampled_$isa.json > "$O/sampled_$isa.txt" 2>&1 &
    wait
    el "cpu levels $isa done" >> "$O/timeline.txt"
    cp /tmp/gc/spread_*_$isa.json /tmp/gc/topk_cpu_$isa.json /tmp/gc/sampled_$isa.json "$O/" 2>/dev/null
  done
}
cpu_levels &
CPUJ=$!
wait $GC; echo "gpu_check rc $?" >> "$O/timeline.txt"; el "gpu_check done" >> "$O/timeline.txt"
cp /tmp/gc/gpu-check.json /tmp/gc/mainjob.json "$O/" 2>/dev/null
grep -E "FAILED|ERROR|Fatal|Segmentation|passed|failed" /tmp/gc/pytest.log | tail -60 > "$O/pytest-summary.txt" 2>&1
# linear_topk on cuda at the XC grid (eager peer on the same GPU)
FK_BENCH_NO_COMPILE=1 timeout 100 taskset -c 0-7 $PY bench/topk.py --device cuda --repeat 5 \
  --out /tmp/gc/topk_cuda.json > "$O/topk_cuda.txt" 2>&1
el "topk cuda rc $?" >> "$O/timeline.txt"; cp /tmp/gc/topk_cuda.json "$O/" 2>/dev/null
# the loop at p = 312330 (data made locally: .gpu/make_xc.py 312330 10000 2000), one algorithm per run,
# cuda (2 threads, cores 0-1) and cpu (6 threads, cores 2-7) side by side
for alg in FedMLH FedSS FedAvg; do
  opts=(--option "$alg.hidden=[64]"); [ $alg = FedMLH ] && opts+=(--option FedMLH.num_tables=8 --option FedMLH.num_buckets=5000)
  pids=()
  for dev in cuda cpu; do
    if [ $dev = cuda ]; then cores=0,1; th=2; else cores=2-7; th=6; fi
    ( cd /tmp && timeout 75 taskset -c $cores /opt/torch/.venv/bin/fedkernels run --dataset $PWD_REPO/.gpu/xc312k \
        --algorithms $alg --rounds 2 --clients 10 --clients-per-round 4 --sparse "${opts[@]}" --no-progress \
        --device $dev --threads $th --output /tmp/xc_${alg}_$dev --no-checkpoint > "$O/xc_${alg}_$dev.txt" 2>&1
      echo "rc $?" >> "$O/xc_${alg}_$dev.txt"
      find /tmp/xc_${alg}_$dev -name results.json -exec cp {} "$O/xc_${alg}_$dev.json" \; ) &
    pids+=($!)
  done
  wait "${pids[@]}"; el "xc loop $alg done" >> "$O/timeline.txt"
done
wait $CPUJ
el "all done" >> "$O/timeline.txt"
