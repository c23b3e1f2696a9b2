// src/ops/distributed/group.cc: the handshake and record exchange of the
// vocabulary-parallel ops (group.h states the contract).
#include "ops/distributed/group.h"

#include <atomic>
#include <cstring>
#include <exception>

#include "core/errors.h"
#include "ops/distributed/sharded_common.h"

namespace smax::detail::dist {
namespace {

constexpr int64_t kStatusOk = 0;
constexpr int64_t kStatusRejected = 1;
constexpr size_t kOpChars = 32;

// What each rank sends in the handshake: plain int64s and chars, the same
// size for every op.
struct Header {
  int64_t status = kStatusOk;
  char op[kOpChars] = {};
  int64_t classes = 0;
  int64_t chunk_bytes = 0;  // the chunking in force (sharded_common.h): agreed too
  int64_t agreed_count = 0;
  int64_t agreed[kMaxAgreed] = {};
};

std::string op_of(const Header& h) {
  return std::string(h.op, strnlen(h.op, kOpChars));
}

}  // namespace

int64_t bits(double v) {
  int64_t out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

int64_t bits(float v) {
  int32_t out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

namespace {
std::atomic<int64_t> g_chunk_bytes{kDefaultChunkBytes};
}  // namespace

int64_t chunk_bytes() { return g_chunk_bytes.load(std::memory_order_relaxed); }
void set_chunk_bytes(int64_t bytes) {
  g_chunk_bytes.store(bytes > 0 ? bytes : kDefaultChunkBytes, std::memory_order_relaxed);
}

std::string op_name(const char* op) { return std::string(op) + " (vocab-parallel)"; }

Group begin(Communicator& comm, const char* op, const std::vector<Agreed>& agreed,
            int64_t local_classes, const std::function<void()>& validate) {
  const std::string name = op_name(op);
  if (agreed.size() > static_cast<size_t>(kMaxAgreed)) {
    throw Error(Status::kInternal, name + ": too many agreed values");
  }
  const int size = comm.size();
  const int rank = comm.rank();
  if (size < 1 || rank < 0 || rank >= size) {
    fail(name.c_str(), "the communicator reports rank " + std::to_string(rank) + " of size " +
                           std::to_string(size));
  }

  Header mine;
  std::exception_ptr local_error;
  try {
    validate();
    if (local_classes < 0) fail(name.c_str(), "negative class count");
  } catch (...) {
    local_error = std::current_exception();
    mine.status = kStatusRejected;
  }
  std::strncpy(mine.op, op, kOpChars - 1);
  mine.classes = mine.status == kStatusOk ? local_classes : 0;
  mine.chunk_bytes = chunk_bytes();
  mine.agreed_count = static_cast<int64_t>(agreed.size());
  for (size_t i = 0; i < agreed.size(); ++i) mine.agreed[i] = agreed[i].value;

  std::vector<Header> all(static_cast<size_t>(size));
  comm.allgather(&mine, all.data(), sizeof(Header));

  if (local_error) std::rethrow_exception(local_error);
  for (int k = 0; k < size; ++k) {
    if (all[k].status != kStatusOk) {
      fail(name.c_str(), "rank " + std::to_string(k) +
                             " rejected its arguments (see that rank's error)");
    }
  }
  for (int k = 0; k < size; ++k) {
    if (op_of(all[k]) != op_of(mine) || all[k].agreed_count != mine.agreed_count) {
      fail(name.c_str(), "ranks call different ops: rank " + std::to_string(rank) + " calls " +
                             op_of(mine) + ", rank " + std::to_string(k) + " calls " +
                             op_of(all[k]));
    }
  }
  for (int k = 0; k < size; ++k) {
    if (all[k].chunk_bytes != all[0].chunk_bytes) {
      fail(name.c_str(), "ranks disagree on the chunk size (set_chunk_bytes): rank 0 has " +
                             std::to_string(all[0].chunk_bytes) + ", rank " + std::to_string(k) +
                             " has " + std::to_string(all[k].chunk_bytes));
    }
  }
  for (size_t i = 0; i < agreed.size(); ++i) {
    for (int k = 0; k < size; ++k) {
      if (all[k].agreed[i] != all[0].agreed[i]) {
        fail(name.c_str(), std::string("ranks disagree on ") + agreed[i].name + ": rank 0 has " +
                               std::to_string(all[0].agreed[i]) + ", rank " + std::to_string(k) +
                               " has " + std::to_string(all[k].agreed[i]));
      }
    }
  }

  Group g;
  g.comm = &comm;
  g.rank = rank;
  g.size = size;
  g.offsets.assign(static_cast<size_t>(size) + 1, 0);
  for (int k = 0; k < size; ++k) {
    if (all[k].classes > INT64_MAX - g.offsets[k]) {
      fail(name.c_str(), "the shards' class counts overflow int64");
    }
    g.offsets[k + 1] = g.offsets[k] + all[k].classes;
  }
  g.offset = g.offsets[rank];
  g.classes = local_classes;
  g.vocab = g.offsets[size];
  return g;
}

template <class T>
std::vector<T> allgather_rows(const Group& g, const std::vector<T>& local) {
  std::vector<T> all(local.size() * static_cast<size_t>(g.size));
  if (!local.empty()) g.comm->allgather(local.data(), all.data(), local.size() * sizeof(T));
  return all;
}
template std::vector<float> allgather_rows(const Group&, const std::vector<float>&);
template std::vector<double> allgather_rows(const Group&, const std::vector<double>&);
template std::vector<int64_t> allgather_rows(const Group&, const std::vector<int64_t>&);

}  // namespace smax::detail::dist

namespace smax::distributed {

ShardLayout shard_layout(Communicator& comm, int64_t local_classes) {
  const detail::dist::Group g = detail::dist::begin(
      comm, "shard_layout", {}, local_classes, [&] {
        if (local_classes < 0) {
          detail::fail("shard_layout", "local_classes must be >= 0, got " +
                                           std::to_string(local_classes));
        }
      });
  return ShardLayout{g.offset, g.classes, g.vocab};
}

}  // namespace smax::distributed
