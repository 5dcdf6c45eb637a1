#include "engine/engine_generate.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace sieve {

Result<GenerateStats> generate_with_engine(Engine& engine, std::span<const int32_t> prompt,
                                           const GenerateOptions& opt,
                                           const std::function<bool(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  RequestParams rp;
  rp.prompt.assign(prompt.begin(), prompt.end());
  rp.max_tokens = opt.n_predict;
  rp.sampling = opt.sampling;
  rp.stop_at_eog = opt.stop_at_eog;
  rp.policy = opt.policy;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, stopped = false;
  RequestEvent last;
  GenerateStats st;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  const auto t0 = clock::now();
  clock::time_point t_first = t0, t_end = t0;
  std::atomic<RequestId> id{0};
  std::atomic<bool> stop_now{false};
  id = engine.submit(std::move(rp), [&](const RequestEvent& ev) {
    // Runs on the engine's thread; the caller waits below until the final event.
    if (!ev.finished) {
      if (st.completion_tokens == 0) t_first = clock::now();
      ++st.completion_tokens;
      if (opt.stop_at_eog && engine.model().tokenizer->is_eog(ev.token)) {
        st.stopped_by_eog = true;
        return;
      }
      if (!stopped && !on_token(ev.token)) {
        stopped = true;
        // the id is known once submit() has returned; until then the caller cancels below
        if (const RequestId known = id.load())
          engine.cancel(known);
        else
          stop_now = true;
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    t_end = clock::now();
    last = ev;
    done = true;
    cv.notify_all();
  });
  if (stop_now) engine.cancel(id);
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (last.reason == FinishReason::error) return make_error("{}", last.error);
  auto ms = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (st.completion_tokens > 0) {
    st.prefill_ms = ms(t0, t_first);
    st.decode_ms = ms(t_first, t_end);
    // (completion_tokens counts the first token too, as Generator does)
  } else {
    st.prefill_ms = ms(t0, t_end);
  }
  st.cached_tokens = last.cached_tokens;
  st.policy = last.policy;
  st.sparse = last.sparse;
  st.kv_bytes = last.sparse.kv_bytes_held;
  return st;
}

}  // namespace sieve
