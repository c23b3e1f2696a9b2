// testing/thread_communicator.cc: see thread_communicator.h.
#include "thread_communicator.h"

#include "smax/error.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace smax::testing {
namespace {

// A reusable barrier (generation counter) that a rank leaving run_ranks'
// function (returned or threw) releases: a rank still waiting then throws
// instead of hanging, which is what a collective mismatch would do under MPI.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (left_) throw std::logic_error(kLeft);
    const long gen = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || left_; });
    if (generation_ == gen) throw std::logic_error(kLeft);
  }
  void leave() {
    std::lock_guard<std::mutex> lock(mu_);
    left_ = true;
    cv_.notify_all();
  }

 private:
  static constexpr const char* kLeft =
      "thread communicator: a rank waits in a collective that another rank left (a collective "
      "count mismatch, or a rank that threw)";
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  long generation_ = 0;
  bool left_ = false;
};

struct Shared {
  explicit Shared(int n)
      : barrier(n), send(static_cast<size_t>(n)), bytes(static_cast<size_t>(n)),
        kind(static_cast<size_t>(n)) {}
  Barrier barrier;
  std::vector<const void*> send;  // each rank's send buffer during a collective
  std::vector<size_t> bytes;      // and its byte count and kind, checked by every rank
  std::vector<int> kind;
};

class ThreadCommunicator final : public distributed::Communicator {
 public:
  ThreadCommunicator(Shared& shared, int rank, int size)
      : shared_(shared), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override {
    publish(kAllgather, send, bytes);
    for (int k = 0; k < size_; ++k) {
      if (bytes) std::memcpy(static_cast<char*>(recv) + k * bytes, shared_.send[k], bytes);
    }
    shared_.barrier.wait();
  }
  void alltoall(const void* send, void* recv, size_t bytes) override {
    publish(kAlltoall, send, bytes);
    for (int k = 0; k < size_; ++k) {
      if (bytes) {
        std::memcpy(static_cast<char*>(recv) + k * bytes,
                    static_cast<const char*>(shared_.send[k]) + rank_ * bytes, bytes);
      }
    }
    shared_.barrier.wait();
  }

 private:
  static constexpr int kAllgather = 0;
  static constexpr int kAlltoall = 1;
  // Publishes this rank's buffer, waits for every rank, and checks that all
  // called the same collective with the same byte count (under MPI a
  // mismatch is undefined behaviour or a hang; here every rank throws).
  void publish(int kind, const void* send, size_t bytes) {
    shared_.send[rank_] = send;
    shared_.bytes[rank_] = bytes;
    shared_.kind[rank_] = kind;
    shared_.barrier.wait();
    for (int k = 0; k < size_; ++k) {
      if (shared_.kind[k] != kind || shared_.bytes[k] != bytes) {
        throw std::logic_error("thread communicator: collective mismatch: rank " +
                               std::to_string(rank_) + " calls " + name(kind) + " of " +
                               std::to_string(bytes) + " bytes, rank " + std::to_string(k) +
                               " " + name(shared_.kind[k]) + " of " +
                               std::to_string(shared_.bytes[k]) + " bytes");
      }
    }
  }
  static const char* name(int kind) { return kind == kAllgather ? "allgather" : "alltoall"; }

  Shared& shared_;
  int rank_;
  int size_;
};

}  // namespace

std::string message_of(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.what();
  } catch (const std::exception& err) {
    return std::string("not an smax::Error: ") + err.what();
  } catch (...) {
    return "not an smax::Error";
  }
}

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
      shared.barrier.leave();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace smax::testing
