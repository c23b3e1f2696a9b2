// tools/smax/progress.h: a progress line on stderr for long commands.
//
// Contract:
//  * Off unless stderr is a terminal (isatty(2)); then it appears only once
//    the command has run for kProgressDelaySeconds, as one line rewritten in
//    place ("\r", ESC[K) every kProgressTickSeconds by a ticker thread:
//      smax: [3/4] float64 reference (backward)... 12 s
//    and finish() (or the destructor) erases it, so stdout output and the
//    one-line "smax: error: ..." are never mixed with it.
//  * SMAX_PROGRESS=1 forces it on without the delay; when stderr is not a
//    terminal it then prints one plain line per step, "smax: [3/4] ...\n",
//    without control codes (for tests and logs). SMAX_PROGRESS=0 forces it off.
//  * The caller may pass enabled = false (e.g. `smax compare` printing its
//    table to the same terminal).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace smax_cli {

inline constexpr double kProgressDelaySeconds = 2.0;
inline constexpr double kProgressTickSeconds = 0.5;

class Progress {
 public:
  /// `steps`: how many step() calls the command will make.
  explicit Progress(int steps, bool enabled = true);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Starts the next step ("float64 reference (backward)").
  void step(const std::string& what);
  /// Erases the line and stops the ticker; later step() calls do nothing.
  void finish();

 private:
  enum class Mode { kOff, kTerminal, kPlain };
  void draw_locked();  // kTerminal: rewrites the line (mutex held)
  void tick();         // ticker thread body

  Mode mode_ = Mode::kOff;
  double delay_s_ = kProgressDelaySeconds;
  int steps_ = 0;
  int current_ = 0;
  std::string what_;
  double start_s_ = 0;
  bool shown_ = false;
  bool done_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

}  // namespace smax_cli
