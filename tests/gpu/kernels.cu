// Small CUDA programs for nsightwrap's GPU tests and probes.
//   app ok            8 short kernels (vec_add / block_reduce), like the reference transcripts
//   app hang [S]      one kernel that spins on a host-mapped flag the host sets after the
//                     launch: fine alone, hangs under ncu (the launch blocks while profiling).
//                     The spin gives up after S seconds (default 60) so the GPU is never held forever.
//   app mixed [S]     3 vec_add, then the hanging kernel, then 2 vec_add
//   app slow [MS]     one kernel that runs MS milliseconds (default 1500) per launch
//   app range         kernels inside cudaProfilerStart/Stop
//   app third [S]     inside one profiler range: vec_add, block_reduce, the hanging kernel, vec_add, block_reduce
//   app many N        N short kernels (alternating vec_add / block_reduce)
//   app two           one vec_add and one block_reduce
//   app twohang [S]   vec_add, the hanging kernel, block_reduce, a second hanging kernel
//                     (wait_for_host_b): two kernels for a sweep with --jobs 2
//   app passes K [S]  vec_add, then wait_for_count, then block_reduce. Each execution of
//                     wait_for_count raises a flag and spins until a host thread answers; the thread
//                     answers the first K executions only. Kernel replay restores all memory between
//                     passes, host-mapped too (a counter kept there read 1 after 10 passes on the GPU
//                     machine), so the count lives on the host: fine alone and under at most K replay
//                     passes (one-pass sections, duration only), hangs when ncu needs more.
//   app spin S [K]    K launches (default 1) of spin_cycles, a kernel that spins for S seconds' worth of
//                     cycles at the card's top clock: S seconds alone; under ncu's base clocks longer
//                     (cycle-bound work, FACTS.md: x1.245 on H100). Prints each launch's time (events).
//   app chatty N      a host thread prints "step I loss 0.5" every 150 ms while N vec_add/spin pairs
//                     (0.2 s spins) run: program output interleaved with ncu's progress lines
//   app none          no kernel at all
//   app selfhang [S]  vec_add, then wait_forever, a kernel that spins on a device flag nobody sets: it hangs
//                     without ncu too (the program's own bug). Gives up after S seconds (default 90).
//   app graph [S]     a CUDA graph of vec_add, spin_cycles (S seconds, default 1) and block_reduce, launched twice
//   app varied A,B,.. launches of nsw::detail::tmpl_spin<float, 4> (a templated kernel in a namespace) that run
//                     A, B, ... seconds each: one kernel name, very different times
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>
#include <atomic>
#include <thread>
#include <chrono>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(3); } } while (0)

__device__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void block_reduce(const float* a, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? a[i] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

__global__ void wait_for_host(volatile int* flag, unsigned long long limit_ns, int* result) {
  unsigned long long t0 = gtime();
  while (*flag == 0) {
    if (gtime() - t0 > limit_ns) { *result = -1; return; }
  }
  *result = 1;
}

__global__ void wait_for_host_b(volatile int* flag, unsigned long long limit_ns, int* result) {
  unsigned long long t0 = gtime();
  while (*flag == 0) {
    if (gtime() - t0 > limit_ns) { *result = -1; return; }
  }
  *result = 1;
}

__global__ void wait_for_count(volatile int* beat, volatile int* release, unsigned long long limit_ns,
                               int* result) {
  *beat = 1;
  __threadfence_system();
  unsigned long long t0 = gtime();
  while (*release == 0) {
    if (gtime() - t0 > limit_ns) { *result = -1; return; }
  }
  *result = 1;
}

__global__ void slow_kernel(unsigned long long ns, int* result) {
  unsigned long long t0 = gtime();
  while (gtime() - t0 < ns) {}
  if (threadIdx.x == 0) *result = 2;
}

__global__ void spin_cycles(long long cycles, int* result) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0) *result = 3;
}

static long long cycles_for(double seconds) {
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return (long long)(seconds * khz * 1e3);
}

static void spin(double seconds, int* r) {
  spin_cycles<<<1, 32>>>(cycles_for(seconds), r);
  CHECK(cudaGetLastError());
}

__global__ void wait_forever(volatile int* flag, unsigned long long limit_ns, int* result) {
  unsigned long long t0 = gtime();
  while (*flag == 0) {
    if (gtime() - t0 > limit_ns) { *result = -1; return; }
  }
}

namespace nsw { namespace detail {
template <typename T, int K>
__global__ void tmpl_spin(long long cycles, T* out) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0) out[0] = T(K);
}
}}  // namespace nsw::detail

static const int N = 1 << 20;
static float *da, *db, *dc, *dsum;

static void setup() {
  CHECK(cudaMalloc(&da, N * sizeof(float)));
  CHECK(cudaMalloc(&db, N * sizeof(float)));
  CHECK(cudaMalloc(&dc, N * sizeof(float)));
  CHECK(cudaMalloc(&dsum, sizeof(float)));
  CHECK(cudaMemset(da, 0, N * sizeof(float)));
  CHECK(cudaMemset(db, 0, N * sizeof(float)));
}

static void add() { vec_add<<<N / 256, 256>>>(da, db, dc, N); CHECK(cudaGetLastError()); }
static void reduce() { block_reduce<<<N / 256, 256>>>(da, dsum, N); CHECK(cudaGetLastError()); }

static int hang(double seconds, bool second = false) {
  int *flag, *dflag, *result, *dresult;
  CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(&result, sizeof(int), cudaHostAllocMapped));
  *flag = 0; *result = 0;
  CHECK(cudaHostGetDevicePointer(&dflag, flag, 0));
  CHECK(cudaHostGetDevicePointer(&dresult, result, 0));
  if (second) wait_for_host_b<<<1, 1>>>(dflag, (unsigned long long)(seconds * 1e9), dresult);
  else wait_for_host<<<1, 1>>>(dflag, (unsigned long long)(seconds * 1e9), dresult);
  CHECK(cudaGetLastError());
  *(volatile int*)flag = 1;  // under ncu this line is reached only after profiling ends
  CHECK(cudaDeviceSynchronize());
  int r = *(volatile int*)result;
  printf("hang kernel result %d (%s)\n", r, r == 1 ? "released by host" : "gave up");
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "ok";
  setup();
  if (!strcmp(mode, "ok")) {
    add(); add(); add(); reduce(); add(); reduce(); add(); reduce();
  } else if (!strcmp(mode, "hang")) {
    hang(argc > 2 ? atof(argv[2]) : 60.0);
  } else if (!strcmp(mode, "mixed")) {
    add(); add(); add();
    CHECK(cudaDeviceSynchronize());
    hang(argc > 2 ? atof(argv[2]) : 60.0);
    add(); add();
  } else if (!strcmp(mode, "slow")) {
    int* r; CHECK(cudaMalloc(&r, sizeof(int)));
    double ms = argc > 2 ? atof(argv[2]) : 1500.0;
    slow_kernel<<<1, 32>>>((unsigned long long)(ms * 1e6), r);
    CHECK(cudaGetLastError());
  } else if (!strcmp(mode, "range")) {
    add();  // outside the range
    CHECK(cudaProfilerStart());
    add(); reduce();
    CHECK(cudaProfilerStop());
    add();
  } else if (!strcmp(mode, "third")) {
    CHECK(cudaProfilerStart());
    add(); reduce();
    CHECK(cudaDeviceSynchronize());
    hang(argc > 2 ? atof(argv[2]) : 60.0);
    add(); reduce();
    CHECK(cudaProfilerStop());
  } else if (!strcmp(mode, "twohang")) {
    double s = argc > 2 ? atof(argv[2]) : 60.0;
    add(); CHECK(cudaDeviceSynchronize());
    hang(s);
    reduce(); CHECK(cudaDeviceSynchronize());
    hang(s, true);
  } else if (!strcmp(mode, "passes")) {
    int k = argc > 2 ? atoi(argv[2]) : 1;
    double s = argc > 3 ? atof(argv[3]) : 60.0;
    int *mem, *dmem;  // beat, release, result
    CHECK(cudaHostAlloc(&mem, 3 * sizeof(int), cudaHostAllocMapped));
    mem[0] = mem[1] = mem[2] = 0;
    CHECK(cudaHostGetDevicePointer(&dmem, mem, 0));
    volatile int* beat = mem;
    volatile int* release = mem + 1;
    std::atomic<bool> done(false);
    std::atomic<int> seen(0);
    std::thread answer([&] {
      while (!done.load()) {
        if (*beat == 1) {
          *beat = 0;
          if (++seen <= k) *release = 1;
        }
      }
    });
    add(); CHECK(cudaDeviceSynchronize());
    wait_for_count<<<1, 1>>>(dmem, dmem + 1, (unsigned long long)(s * 1e9), dmem + 2);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    done = true;
    answer.join();
    printf("wait_for_count ran %d time(s), result %d\n", seen.load(), mem[2]);
    reduce();
  } else if (!strcmp(mode, "many")) {
    int n = argc > 2 ? atoi(argv[2]) : 300;
    for (int i = 0; i < n; i++) { if (i % 2) reduce(); else add(); }
  } else if (!strcmp(mode, "two")) {
    add(); reduce();
  } else if (!strcmp(mode, "spin")) {
    double sec = argc > 2 ? atof(argv[2]) : 8.0;
    int k = argc > 3 ? atoi(argv[3]) : 1;
    int* r; CHECK(cudaMalloc(&r, sizeof(int)));
    cudaEvent_t a, b; CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&b));
    for (int i = 0; i < k; i++) {
      CHECK(cudaEventRecord(a));
      spin(sec, r);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms = 0; CHECK(cudaEventElapsedTime(&ms, a, b));
      printf("spin_cycles launch %d: %.3f s\n", i, ms / 1e3);
      fflush(stdout);
    }
  } else if (!strcmp(mode, "chatty")) {
    int n = argc > 2 ? atoi(argv[2]) : 3;
    int* r; CHECK(cudaMalloc(&r, sizeof(int)));
    std::atomic<bool> done(false);
    std::thread talk([&] {
      for (int i = 0; !done.load(); i++) {
        printf("step %d loss 0.5\n", i); fflush(stdout);
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
      }
    });
    for (int i = 0; i < n; i++) { add(); CHECK(cudaDeviceSynchronize()); spin(0.2, r); CHECK(cudaDeviceSynchronize()); }
    done = true;
    talk.join();
  } else if (!strcmp(mode, "selfhang")) {
    double s = argc > 2 ? atof(argv[2]) : 90.0;
    int *flag, *r;
    CHECK(cudaMalloc(&flag, sizeof(int))); CHECK(cudaMemset(flag, 0, sizeof(int)));
    CHECK(cudaMalloc(&r, sizeof(int)));
    add(); CHECK(cudaDeviceSynchronize());
    wait_forever<<<1, 1>>>(flag, (unsigned long long)(s * 1e9), r);
    CHECK(cudaGetLastError());
  } else if (!strcmp(mode, "graph")) {
    double s = argc > 2 ? atof(argv[2]) : 1.0;
    int* r; CHECK(cudaMalloc(&r, sizeof(int)));
    cudaStream_t st; CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g; cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    vec_add<<<N / 256, 256, 0, st>>>(da, db, dc, N);
    spin_cycles<<<1, 32, 0, st>>>(cycles_for(s), r);
    block_reduce<<<N / 256, 256, 0, st>>>(da, dsum, N);
    CHECK(cudaStreamEndCapture(st, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 2; i++) CHECK(cudaGraphLaunch(ge, st));
    CHECK(cudaStreamSynchronize(st));
  } else if (!strcmp(mode, "varied")) {
    float* out; CHECK(cudaMalloc(&out, sizeof(float)));
    char* list = argc > 2 ? argv[2] : (char*)"0.1,2,0.3";
    for (char* t = strtok(list, ","); t; t = strtok(nullptr, ",")) {
      nsw::detail::tmpl_spin<float, 4><<<1, 32>>>(cycles_for(atof(t)), out);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      printf("tmpl_spin %s s done\n", t); fflush(stdout);
    }
  } else if (!strcmp(mode, "none")) {
  } else {
    fprintf(stderr, "unknown mode %s\n", mode); return 2;
  }
  CHECK(cudaDeviceSynchronize());
  printf("%s: %s\n", mode, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
