// A small CUDA program for `make run`: three short kernels and nothing but the CUDA runtime,
// so that a machine with a GPU, its driver and the CUDA toolkit (nvcc) needs no PyTorch.
//   nvcc -O2 -o build/examples/kernels examples/kernels.cu && build/examples/kernels
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); return 3; } } while (0)

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

__global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

int main() {
  const int n = 1 << 20, threads = 256, blocks = (n + threads - 1) / threads;
  float *a = nullptr, *b = nullptr, *c = nullptr, *sum = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(float)));
  CHECK(cudaMalloc(&b, n * sizeof(float)));
  CHECK(cudaMalloc(&c, n * sizeof(float)));
  CHECK(cudaMalloc(&sum, sizeof(float)));
  CHECK(cudaMemset(sum, 0, sizeof(float)));
  fill<<<blocks, threads>>>(a, 1.0f, n);
  fill<<<blocks, threads>>>(b, 2.0f, n);
  vec_add<<<blocks, threads>>>(a, b, c, n);
  scale<<<blocks, threads>>>(c, 0.5f, n);
  block_sum<<<blocks, threads>>>(c, sum, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float host = 0.f;
  CHECK(cudaMemcpy(&host, sum, sizeof(float), cudaMemcpyDeviceToHost));
  printf("kernels ok: sum %.0f (expected %d)\n", host, 3 * n / 2);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  CHECK(cudaFree(sum));
  return 0;
}
