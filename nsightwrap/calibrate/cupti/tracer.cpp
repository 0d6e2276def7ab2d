// nsightwrap's kernel tracer: a CUPTI injection library.
//
// The CUDA driver loads it into any CUDA program through CUDA_INJECTION64_PATH and
// calls InitializeInjection() once. It does nothing unless NSIGHTWRAP_TRACE_DIR is
// set. Then every kernel launch and every finished kernel of the process is written,
// as it happens, to $NSIGHTWRAP_TRACE_DIR/trace-<pid>.jsonl (0600): one JSON object
// a line, each line written whole with one write(2), so nsightwrap can follow the
// file while the program runs. The format is documented in trace.py beside this
// file (the "CUPTI tracer's trace format"):
//   init   {"ev":"init","pid":P,"mono_ns":M,"cupti_ns":C,"version":1}
//   launch {"ev":"launch","pid":P,"corr":N,"seq":K,"name":"...","mono_ns":M}
//   graph  {"ev":"graph","pid":P,"corr":N,"mono_ns":M}
//   kernel {"ev":"kernel","pid":P,"corr":N,"name":"...","start_ns":S,"end_ns":E,"graph":0|1}
//   range  {"ev":"range","pid":P,"api":"cuProfilerStart"|"cuProfilerStop","mono_ns":M}
//   sync   {"ev":"sync","pid":P,"corr":N,"mono_ns":M}  a device-wide synchronize returned: every launch
//          of the process with a smaller corr has finished (its record may still come later)
//   error  {"ev":"error","pid":P,"what":"..."}   the tracer could not set itself up (or lost records)
//   note   {"ev":"note","pid":P,"what":"..."}    a CUPTI call failed that tracing does without
//   exit   {"ev":"exit","pid":P,"mono_ns":M}
// Launches are seen by the driver API's callbacks (the runtime launches through
// them); finished kernels by CUPTI's activity API (CONCURRENT_KERNEL, which does
// not serialise kernels), handed over by a flush every 100 ms from a thread of the tracer. Any CUPTI failure is written as an
// "error" line and the program runs on untraced.
//
// Built by nsightwrap/calibrate/cupti/build.py:
//   c++ -shared -fPIC -O2 tracer.cpp -I<cuda>/include -L<cupti lib> -lcupti -Wl,-rpath,<cupti lib> -ldl -pthread

#include <cupti.h>
#include <cxxabi.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int g_fd = -1;
std::atomic<uint64_t> g_seq{0};
CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<bool> g_stop{false};
std::thread g_flusher;
// CUPTI places a kernel's record in a buffer at its launch and hands a buffer over only once all its
// records are complete, so one kernel still running holds back every finished kernel in its buffer (seen
// on the GPU machine: 12 s for a kernel launched just before one that hung). Small buffers hold few records
// (1 KiB: four; 3000 launches cost the same as with 1 MiB buffers, devtools/gpu-runs/*tracer-lag-2.log).
#ifndef NSW_BUFFER_BYTES
#define NSW_BUFFER_BYTES 1024
#endif
const size_t kBufferSize = NSW_BUFFER_BYTES;

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// JSON string body: quotes, backslashes and control characters escaped; bytes >= 0x80
// are kept (kernel names are UTF-8 or ASCII).
void append_json_string(std::string &out, const char *s) {
  out += '"';
  for (const char *p = s ? s : ""; *p; ++p) {
    unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// The demangled name (ncu and nsys show demangled names), else the name as given.
std::string demangled(const char *name) {
  if (name == nullptr) return "?";
  int status = 0;
  char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d != nullptr) ? d : name;
  free(d);
  return out;
}

void write_line(std::string line) {
  if (g_fd < 0) return;
  line += '\n';
  const char *p = line.data();
  size_t left = line.size();
  while (left > 0) {  // one write(2) for a line of normal size; the loop only for EINTR and huge names
    ssize_t n = write(g_fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= size_t(n);
  }
}

std::string head(const char *ev) {
  std::string s = "{\"ev\":\"";
  s += ev;
  s += "\",\"pid\":";
  s += std::to_string(getpid());
  return s;
}

void write_error(const char *what, CUptiResult res, const char *ev = "error") {
  const char *text = nullptr;
  cuptiGetResultString(res, &text);
  std::string why = std::string(what) + ": " + (text ? text : "unknown CUPTI error");
  std::string s = head(ev);
  s += ",\"what\":";
  append_json_string(s, why.c_str());
  s += "}";
  write_line(s);
}

bool is_kernel_launch(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
      return true;
    default:
      return false;
  }
}

void CUPTIAPI on_api(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const CUpti_CallbackData *cb = static_cast<const CUpti_CallbackData *>(data);
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize || cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2) {
    // A finished kernel's record can be held back by a later one still running (see kBufferSize), so a
    // device-wide synchronize that returned is what says that the launches before it have finished.
    if (cb->callbackSite != CUPTI_API_EXIT) return;
    std::string s = head("sync");
    s += ",\"corr\":" + std::to_string(cb->correlationId);
    s += ",\"mono_ns\":" + std::to_string(mono_ns()) + "}";
    write_line(s);
    return;
  }
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  if (is_kernel_launch(cbid)) {
    std::string s = head("launch");
    s += ",\"corr\":" + std::to_string(cb->correlationId);
    s += ",\"seq\":" + std::to_string(g_seq.fetch_add(1));
    s += ",\"name\":";
    append_json_string(s, demangled(cb->symbolName).c_str());
    s += ",\"mono_ns\":" + std::to_string(mono_ns()) + "}";
    write_line(s);
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) {
    std::string s = head("graph");
    s += ",\"corr\":" + std::to_string(cb->correlationId);
    s += ",\"mono_ns\":" + std::to_string(mono_ns()) + "}";
    write_line(s);
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart || cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop) {
    std::string s = head("range");
    s += cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart ? ",\"api\":\"cuProfilerStart\"" : ",\"api\":\"cuProfilerStop\"";
    s += ",\"mono_ns\":" + std::to_string(mono_ns()) + "}";
    write_line(s);
  }
}

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  void *p = nullptr;
  if (posix_memalign(&p, 8, kBufferSize) != 0) p = nullptr;
  *buffer = static_cast<uint8_t *>(p);
  *size = p ? kBufferSize : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
  CUpti_Activity *record = nullptr;
  while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const CUpti_ActivityKernel10 *k = reinterpret_cast<const CUpti_ActivityKernel10 *>(record);
    if (k->end == 0 || k->end < k->start) continue;  // incomplete (a forced flush at exit): no time to tell
    std::string s = head("kernel");
    s += ",\"corr\":" + std::to_string(k->correlationId);
    s += ",\"name\":";
    append_json_string(s, demangled(k->name).c_str());
    s += ",\"start_ns\":" + std::to_string(k->start);
    s += ",\"end_ns\":" + std::to_string(k->end);
    s += std::string(",\"graph\":") + (k->graphId != 0 ? "1" : "0") + "}";
    write_line(s);
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    std::string s = head("error");
    s += ",\"what\":\"CUPTI dropped " + std::to_string(dropped) + " activity records\"}";
    write_line(s);
  }
  free(buffer);
}

// CUPTI's own periodic flush hands over only full buffers, so a finished kernel could wait until the
// end of the program (seen on the GPU machine). A default flush (flag 0) hands over every buffer whose
// records are all complete, full or not: made every 100 ms, it brings finished kernels out promptly.
void flush_loop() {
  while (!g_stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!g_stop.load()) cuptiActivityFlushAll(0);
  }
}

void at_exit() {
  if (g_fd < 0) return;
  g_stop.store(true);
  if (g_flusher.joinable()) g_flusher.join();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::string s = head("exit");
  s += ",\"mono_ns\":" + std::to_string(mono_ns()) + "}";
  write_line(s);
}

bool check(const char *what, CUptiResult res) {
  if (res == CUPTI_SUCCESS) return true;
  write_error(what, res);
  return false;
}

bool start_tracing() {
  if (!check("cuptiSubscribe", cuptiSubscribe(&g_subscriber, (CUpti_CallbackFunc)on_api, nullptr))) return false;
  const CUpti_CallbackId ids[] = {
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,       CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuLaunch,               CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,     CUPTI_DRIVER_TRACE_CBID_cuProfilerStart,
      CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,         CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
      CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
  };
  for (CUpti_CallbackId id : ids) {
    if (!check("cuptiEnableCallback", cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id))) return false;
  }
  if (!check("cuptiActivityRegisterCallbacks", cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)))
    return false;
  if (!check("cuptiActivityEnable", cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL))) return false;
  // Finished kernels reach the file within about 0.1 s, also while another kernel still runs.
  CUptiResult period = cuptiActivityFlushPeriod(100);  // the tracer's own flush thread does without it
  if (period != CUPTI_SUCCESS) write_error("cuptiActivityFlushPeriod", period, "note");
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  const char *dir = getenv("NSIGHTWRAP_TRACE_DIR");
  if (dir == nullptr || *dir == '\0') return 1;
  std::string path = std::string(dir) + "/trace-" + std::to_string(getpid()) + ".jsonl";
  g_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (g_fd < 0) return 1;
  uint64_t cupti_now = 0;
  cuptiGetTimestamp(&cupti_now);
  std::string s = head("init");
  s += ",\"mono_ns\":" + std::to_string(mono_ns());
  s += ",\"cupti_ns\":" + std::to_string(cupti_now) + ",\"version\":1}";
  write_line(s);
  if (start_tracing()) {
    g_flusher = std::thread(flush_loop);
    atexit(at_exit);
  }
  return 1;
}
