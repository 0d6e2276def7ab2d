// Kernels with planted bugs, for `nsightwrap triage` and compute-sanitizer under the watchdog (issue 21).
// Build: nvcc -O2 -arch=sm_90 -lineinfo -o triage_kernels tests/gpu/triage_kernels.cu
//   triage_kernels clean           vec_add and a correct block reduction: nothing to find
//   triage_kernels oob             oob_write: 32 threads write just past the end of their buffer (memcheck:
//                                  "Invalid __global__ write of size 4 bytes"; without a tool it may well pass)
//   triage_kernels race            reduce_race: a block reduction missing the __syncthreads() between its steps
//                                  (racecheck: shared-memory hazards; synccheck reports nothing, FACTS.md)
//   triage_kernels uninit          read_uninit: reads 4,096 floats nobody wrote (initcheck)
//   triage_kernels flaky [P] [SEED] flaky_write: with probability P (default 0.3), drawn on the host (seeded by
//                                  SEED, else by the time and pid), writes 16 GiB past its buffer: an illegal
//                                  address, so the program fails ("failed N of M runs"); else it is clean
//   triage_kernels selfhang [S]    wait_forever: spins on a device flag nobody sets; hangs with or without a
//                                  tool (the program's own bug). Gives up after S seconds (default 90)
//   triage_kernels ncuhang [S]     wait_for_host: spins on a host-mapped flag the host sets after the launch
//                                  (tests/gpu/kernels.cu's `hang`): fine alone, hangs under ncu, whose launch
//                                  blocks while it profiles. Gives up after S seconds (default 60)
// Each mode prints what it did; a CUDA error is printed as "CUDA error: <message> (<cudaErrorName>) after
// <kernel>" and the program exits 1. The lines the sanitizer must name carry a "// <- MODE" marker
// (tests/gpu/test_triage_gpu.py finds them by it).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

static void check(cudaError_t e, const char* after) {
  if (e != cudaSuccess) {
    printf("CUDA error: %s (%s) after %s\n", cudaGetErrorString(e), cudaGetErrorName(e), after);
    fflush(stdout);
    exit(1);
  }
}

__device__ unsigned long long gtime() {
  unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void block_reduce(const float* in, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void oob_write(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = 1.0f;  // <- oob: launched with 32 threads more than n, no bounds check
}

__global__ void reduce_race(const float* in, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];  // <- race: no __syncthreads() between steps
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void read_uninit(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f;  // <- uninit: nobody wrote `in`
}

__global__ void flaky_write(float* out, int n, long long offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i + offset] = 1.0f;  // <- flaky: offset is 16 GiB in a bad run, 0 in a good one
}

__global__ void wait_forever(volatile int* flag, unsigned long long limit_ns, int* result) {
  unsigned long long t0 = gtime();
  while (*flag == 0) {  // <- selfhang: nobody sets the flag
    if (gtime() - t0 > limit_ns) { *result = 2; return; }
  }
  *result = 1;
}

__global__ void wait_for_host(volatile int* flag, unsigned long long limit_ns, int* result) {
  unsigned long long t0 = gtime();
  while (*flag == 0) {  // <- ncuhang: the host sets the flag after the launch
    if (gtime() - t0 > limit_ns) { *result = 2; return; }
  }
  *result = 1;
}

static const int N = 1 << 16;

static void clean() {
  float *a, *b, *c, *sums;
  check(cudaMalloc(&a, N * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&b, N * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&c, N * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&sums, (N / 256) * sizeof(float)), "cudaMalloc");
  check(cudaMemset(a, 0, N * sizeof(float)), "cudaMemset");
  check(cudaMemset(b, 0, N * sizeof(float)), "cudaMemset");
  vec_add<<<N / 256, 256>>>(a, b, c, N);
  block_reduce<<<N / 256, 256>>>(c, sums, N);
  check(cudaDeviceSynchronize(), "block_reduce");
  printf("clean: vec_add and block_reduce done\n");
}

static void oob() {
  float* out;
  const int n = 1024;
  check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
  oob_write<<<(n + 32) / 32, 32>>>(out, n);  // 33 blocks of 32: one block more than n
  check(cudaDeviceSynchronize(), "oob_write");
  printf("oob: oob_write done\n");
}

static void race() {
  float *in, *out;
  check(cudaMalloc(&in, N * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&out, 64 * sizeof(float)), "cudaMalloc");
  check(cudaMemset(in, 0, N * sizeof(float)), "cudaMemset");
  reduce_race<<<64, 256>>>(in, out, 64 * 256);
  check(cudaDeviceSynchronize(), "reduce_race");
  printf("race: reduce_race done\n");
}

static void uninit() {
  float *in, *out;
  const int n = 4096;
  check(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
  read_uninit<<<n / 256, 256>>>(in, out, n);
  check(cudaDeviceSynchronize(), "read_uninit");
  printf("uninit: read_uninit done\n");
}

static void flaky(double p, unsigned seed) {
  srand(seed);
  double draw = rand() / (RAND_MAX + 1.0);
  bool bad = draw < p;
  printf("flaky: seed %u, draw %.3f, p %.2f: %s run\n", seed, draw, p, bad ? "bad" : "good");
  fflush(stdout);
  float* out;
  const int n = 1024;
  check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
  flaky_write<<<n / 256, 256>>>(out, n, bad ? (4LL << 30) : 0LL);
  check(cudaDeviceSynchronize(), "flaky_write");
  printf("flaky: flaky_write done\n");
}

static void hang(bool host_sets_flag, double seconds) {
  int *flag, *dflag, *result, *dresult;
  unsigned long long limit = (unsigned long long)(seconds * 1e9);
  check(cudaHostAlloc(&result, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
  *result = 0;
  check(cudaHostGetDevicePointer(&dresult, result, 0), "cudaHostGetDevicePointer");
  if (host_sets_flag) {
    check(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
    *flag = 0;
    check(cudaHostGetDevicePointer(&dflag, flag, 0), "cudaHostGetDevicePointer");
    wait_for_host<<<1, 1>>>(dflag, limit, dresult);
    check(cudaGetLastError(), "wait_for_host");
    *(volatile int*)flag = 1;  // under ncu this line is reached only after profiling ends
  } else {
    check(cudaMalloc(&dflag, sizeof(int)), "cudaMalloc");
    check(cudaMemset(dflag, 0, sizeof(int)), "cudaMemset");
    wait_forever<<<1, 1>>>(dflag, limit, dresult);
    check(cudaGetLastError(), "wait_forever");
  }
  check(cudaDeviceSynchronize(), host_sets_flag ? "wait_for_host" : "wait_forever");
  int r = *(volatile int*)result;
  printf("%s: result %d (%s)\n", host_sets_flag ? "ncuhang" : "selfhang", r,
         r == 1 ? "released by host" : "gave up");
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "clean";
  double arg = argc > 2 ? atof(argv[2]) : -1;
  if (!strcmp(mode, "clean")) clean();
  else if (!strcmp(mode, "oob")) oob();
  else if (!strcmp(mode, "race")) race();
  else if (!strcmp(mode, "uninit")) uninit();
  else if (!strcmp(mode, "flaky")) {
    unsigned seed = argc > 3 ? (unsigned)strtoul(argv[3], nullptr, 10)
                             : (unsigned)(std::chrono::steady_clock::now().time_since_epoch().count() ^ getpid());
    flaky(arg >= 0 ? arg : 0.3, seed);
  } else if (!strcmp(mode, "selfhang")) hang(false, arg > 0 ? arg : 90.0);
  else if (!strcmp(mode, "ncuhang")) hang(true, arg > 0 ? arg : 60.0);
  else {
    fprintf(stderr, "unknown mode %s: clean oob race uninit flaky [P] [SEED] selfhang [S] ncuhang [S]\n", mode);
    return 2;
  }
  return 0;
}
