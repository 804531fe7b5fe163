// BackgroundTask: one thread of its own that runs a function beside the caller: Start hands it
// over, Wait returns once it has run. The runner fills a step's structured-output masks with it
// while the forward runs. The thread starts with the first task and sleeps between tasks.
//
// Thread-safety: Start and Wait are called by one thread (the engine thread), alternately.
#ifndef KVSERVE_RUNNER_BACKGROUND_TASK_H_
#define KVSERVE_RUNNER_BACKGROUND_TASK_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kvserve {

class BackgroundTask {
 public:
  BackgroundTask() = default;
  ~BackgroundTask();  // waits for a started task
  BackgroundTask(const BackgroundTask&) = delete;
  BackgroundTask& operator=(const BackgroundTask&) = delete;

  // REQUIRES: no task started and not yet waited for.
  void Start(std::function<void()> task);
  // Returns at once when no task was started.
  void Wait();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;  // a task arrived or finished, or stop_
  std::function<void()> task_;  // started, not yet run
  bool running_ = false;        // a task was started and has not finished
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_BACKGROUND_TASK_H_
