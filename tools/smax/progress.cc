// tools/smax/progress.cc: the progress line (contract in progress.h).
#include "progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "timing.h"

namespace smax_cli {

Progress::Progress(int steps, bool enabled) : steps_(steps), start_s_(now_seconds()) {
  const char* env = std::getenv("SMAX_PROGRESS");
  const bool tty = isatty(2) != 0;
  if (env != nullptr && std::strcmp(env, "0") == 0) return;
  const bool forced = env != nullptr && std::strcmp(env, "1") == 0;
  if (forced) {
    // On a terminal a caller's `enabled = false` (e.g. compare, whose table
    // goes to the same terminal) still wins over the rewritten line; plain
    // lines (stderr not a terminal) are always safe.
    if (tty && !enabled) return;
    mode_ = tty ? Mode::kTerminal : Mode::kPlain;
    delay_s_ = 0;
  } else if (tty && enabled) {
    mode_ = Mode::kTerminal;
  }
  if (mode_ == Mode::kTerminal) ticker_ = std::thread([this] { tick(); });
}

Progress::~Progress() { finish(); }

void Progress::step(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (mode_ == Mode::kOff || done_) return;
  ++current_;
  what_ = what;
  if (mode_ == Mode::kPlain) {
    std::fprintf(stderr, "smax: [%d/%d] %s...\n", current_, steps_, what_.c_str());
    std::fflush(stderr);
  } else {
    draw_locked();
  }
}

void Progress::draw_locked() {
  const double elapsed = now_seconds() - start_s_;
  if (elapsed < delay_s_ || current_ == 0) return;
  std::fprintf(stderr, "\r\033[Ksmax: [%d/%d] %s... %.0f s", current_, steps_, what_.c_str(),
               elapsed);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done_) {
    wake_.wait_for(lock, std::chrono::duration<double>(kProgressTickSeconds));
    if (!done_) draw_locked();
  }
}

void Progress::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    if (shown_) {
      std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    }
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace smax_cli
