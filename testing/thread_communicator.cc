// testing/thread_communicator.cc: see thread_communicator.h.
#include "thread_communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace smax::testing {
namespace {

// A reusable barrier (generation counter).
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const long gen = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  long generation_ = 0;
};

struct Shared {
  explicit Shared(int n) : barrier(n), send(static_cast<size_t>(n)) {}
  Barrier barrier;
  std::vector<const void*> send;  // each rank's send buffer during a collective
};

class ThreadCommunicator final : public distributed::Communicator {
 public:
  ThreadCommunicator(Shared& shared, int rank, int size)
      : shared_(shared), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override {
    shared_.send[rank_] = send;
    shared_.barrier.wait();
    for (int k = 0; k < size_; ++k) {
      if (bytes) std::memcpy(static_cast<char*>(recv) + k * bytes, shared_.send[k], bytes);
    }
    shared_.barrier.wait();
  }
  void alltoall(const void* send, void* recv, size_t bytes) override {
    shared_.send[rank_] = send;
    shared_.barrier.wait();
    for (int k = 0; k < size_; ++k) {
      if (bytes) {
        std::memcpy(static_cast<char*>(recv) + k * bytes,
                    static_cast<const char*>(shared_.send[k]) + rank_ * bytes, bytes);
      }
    }
    shared_.barrier.wait();
  }

 private:
  Shared& shared_;
  int rank_;
  int size_;
};

}  // namespace

std::vector<std::exception_ptr> run_ranks(
    int ranks, const std::function<void(distributed::Communicator& comm, int rank)>& fn) {
  Shared shared(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(shared, r, ranks);
      try {
        fn(comm, r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace smax::testing
