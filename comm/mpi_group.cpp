// The MPI process group. All MPI calls happen on one communication thread, which runs the
// collectives strictly in the order they were launched (the same order on every rank), while the
// caller's thread goes on computing: this is what lets gradient all-reduces overlap backward.
// The collectives are written out over point-to-point messages (rings; recursive doubling for
// small all-reduces), so the bytes each rank sends, and its exchanges, are exactly those counted.
// For comparison, AllReduceAlgorithm::mpi hands all-reduces to the library's MPI_Iallreduce.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <pthread.h>

#include "comm/host_reduce.h"
#include "comm/message_pieces.h"
#include "comm/mpi_library_reduce.h"
#include "comm/mpi_work.h"
#include "comm/packed_fields.h"
#include "comm/process_group.h"
#include "core/cpu_time.h"

#ifdef PAC_WITH_MPI
#include <mpi.h>
#endif

namespace pac::comm {

#ifndef PAC_WITH_MPI
ProcessGroupPtr make_mpi_group() {
  PAC_FAIL("--backend mpi: this build has no MPI (install libopenmpi-dev and reconfigure)");
}
#else

namespace {

// Whether the thread level MPI provides lets the communication thread make every MPI call: it is
// the "main" thread when it initialised MPI itself (FUNNELED suffices), otherwise MPI must allow
// calls from any one thread at a time (SERIALIZED).
void check_thread_level(int provided, bool initialised_here, bool is_main_thread) {
  auto name = [](int level) -> std::string {
    if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
    if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
    if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
    if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
    return std::to_string(level);
  };
  if (initialised_here || is_main_thread) {
    PAC_CHECK(provided >= MPI_THREAD_FUNNELED,
              "MPI provides thread level {}; pactrain makes its MPI calls on a communication "
              "thread and needs at least MPI_THREAD_FUNNELED (an MPI built without thread support "
              "cannot run it)",
              name(provided));
  } else {
    PAC_CHECK(provided >= MPI_THREAD_SERIALIZED,
              "MPI was initialised by another thread with thread level {}; pactrain's "
              "communication thread then needs MPI_THREAD_SERIALIZED or higher (initialise MPI "
              "with MPI_Init_thread and MPI_THREAD_SERIALIZED, or let pactrain initialise it)",
              name(provided));
  }
}

void check_host(const Tensor& t, const char* collective) {
  PAC_CHECK(!t.is_cuda(),
            "{}: the mpi backend reduces host tensors, {} is on {}; use --backend nccl", collective,
            t.str(), t.device().str());
}

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup() {
    // MPI starts on the communication thread, the only thread that ever calls it.
    thread_ = std::thread([this] {
      // Named, so that top -H, perf and renice can tell it from the compute threads.
      pthread_setname_np(pthread_self(), "pac-comm");
      MemoryTagScope tag(MemoryTag::compressor);  // wire buffers
      bool ok = true;
      try {
        int provided = 0, initialized = 0, is_main = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
          MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
          owns_mpi_ = true;
        } else {
          MPI_Query_thread(&provided);
          MPI_Is_thread_main(&is_main);
        }
        check_thread_level(provided, owns_mpi_, is_main != 0);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        library_ = std::make_unique<LibraryAllReduce>();
        int* tag_ub = nullptr;
        int has_tag_ub = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
        const int64_t largest_tag = has_tag_ub && tag_ub ? *tag_ub : 32767;
        // The largest tag is (7 << bits) | (2^bits - 1) = (8 << bits) - 1.
        while (sequence_bits_ < 28 && (int64_t(8) << (sequence_bits_ + 1)) - 1 <= largest_tag)
          ++sequence_bits_;
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local_rank_);
        MPI_Comm_free(&node);
      } catch (...) {
        init_error_ = std::current_exception();
        ok = false;
      }
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        started_ = true;
        queue_cv_.notify_all();
      }
      if (ok) run_queue();
    });
    std::unique_lock<std::mutex> lock(queue_mutex_);
    queue_cv_.wait(lock, [&] { return started_; });
    if (init_error_) {
      lock.unlock();
      thread_.join();
      std::rethrow_exception(init_error_);
    }
  }

  ~MpiGroup() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
      queue_cv_.notify_all();
    }
    thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

  WorkPtr all_reduce(Tensor t, ReduceOp op) override { return all_reduce_coalesced({{t, op}}); }

  WorkPtr all_reduce_coalesced(std::vector<ReduceSegment> segments) override {
    PAC_CHECK(!segments.empty(), "all_reduce_coalesced: no tensors to reduce");
    int64_t elements = 0, bytes = 0;
    for (const auto& s : segments) {
      check_host(s.tensor, "all_reduce");
      check_packed_sum(s, size_);
      elements += s.tensor.numel();
      bytes += static_cast<int64_t>(s.tensor.nbytes());
    }
    const AllReduceAlgorithm chosen = all_reduce_algorithm();
    // On 2 ranks doubling sends the ring's bytes in one exchange instead of two: it is never
    // slower (bench-allreduce on the testbed: the same to 128 kB, 1.5x faster at 256 kB).
    const bool doubling =
        chosen == AllReduceAlgorithm::doubling ||
        (chosen == AllReduceAlgorithm::automatic && (bytes <= kDoublingMaxBytes || size_ == 2));
    const bool library = chosen == AllReduceAlgorithm::mpi;
    const PackedWire wire = packed_wire();
    return launch("all_reduce", elements, segments.front().tensor.dtype(),
                  [segments, doubling, library, wire, this]() mutable {
                    if (library) {
                      library_all_reduce(segments);
                    } else if (doubling) {
                      doubling_all_reduce(segments, wire);
                    } else {
                      ring_reduce_scatter(segments, wire, "all_reduce");
                      ring_all_gather_chunks(segments, wire, "all_reduce");
                    }
                    for (auto& s : segments) {
                      if (s.op == ReduceOp::avg) divide(s.tensor, size_);
                    }
                  });
  }

  WorkPtr broadcast(Tensor t, int root) override {
    check_host(t, "broadcast");
    PAC_CHECK(root >= 0 && root < size_, "broadcast: root {} is not a rank of {}", root, size_);
    return launch("broadcast", t, [=, this]() mutable {
      // A chain from the root: each rank receives from the one before it and forwards.
      int position = (rank_ - root + size_) % size_;
      int prev = (rank_ - 1 + size_) % size_, next = (rank_ + 1) % size_;
      char* p = static_cast<char*>(t.raw_data());
      const int64_t chunk = 1 << 20;
      for (int64_t at = 0; at < static_cast<int64_t>(t.nbytes()); at += chunk) {
        int n = static_cast<int>(std::min<int64_t>(chunk, t.nbytes() - at));
        if (position > 0) receive_checked(p + at, n, prev);
        if (position < size_ - 1) {
          MPI_Request sent;
          MPI_Isend(p + at, n, MPI_BYTE, next, running_.tag, MPI_COMM_WORLD, &sent);
          wait_for(sent);
          count_bytes("broadcast", n);
        }
        count_exchange();
      }
    });
  }

  WorkPtr all_gather(Tensor in, Tensor out) override {
    PAC_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(),
              "all_gather: output {} must hold {} x {}", out.str(), size_, in.str());
    return all_gather_v(in, out, std::vector<int64_t>(size_, in.numel()));
  }

  WorkPtr all_gather_v(Tensor in, Tensor out, std::vector<int64_t> counts) override {
    check_host(in, "all_gather");
    check_host(out, "all_gather");
    PAC_CHECK(static_cast<int>(counts.size()) == size_, "all_gather_v: {} counts for {} ranks",
              counts.size(), size_);
    PAC_CHECK(counts[rank_] == in.numel(), "all_gather_v: rank {} declares {} elements, has {}",
              rank_, counts[rank_], in.numel());
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    PAC_CHECK(out.numel() == total && out.dtype() == in.dtype(),
              "all_gather_v: output {} must hold {} elements of {}", out.str(), total,
              dtype_name(in.dtype()));
    return launch("all_gather", out, [=, this]() mutable {
      std::vector<int64_t> offsets(size_ + 1, 0);
      for (int r = 0; r < size_; ++r) offsets[r + 1] = offsets[r] + counts[r];
      size_t elem = dtype_size(in.dtype());
      char* base = static_cast<char*>(out.raw_data());
      std::memcpy(base + offsets[rank_] * elem, in.raw_data(), in.nbytes());
      int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
      for (int s = 0; s < size_ - 1; ++s) {
        int send_block = (rank_ - s + size_) % size_, recv_block = (rank_ - s - 1 + size_) % size_;
        exchange(base + offsets[send_block] * elem, counts[send_block] * elem, next,
                 base + offsets[recv_block] * elem, counts[recv_block] * elem, prev, "all_gather");
      }
    });
  }

  WorkPtr reduce_scatter(Tensor in, Tensor out, ReduceOp op) override {
    check_host(in, "reduce_scatter");
    check_host(out, "reduce_scatter");
    PAC_CHECK(
        in.numel() == out.numel() * size_ && in.dtype() == out.dtype() && in.numel() % size_ == 0,
        "reduce_scatter: input {} must hold {} x output {}", in.str(), size_, out.str());
    // The working copy belongs to the task, so that it outlives a send still posted from it when
    // the collective fails.
    Tensor work = Tensor::empty(in.shape(), in.dtype());
    return launch("reduce_scatter", in, [=, this]() mutable {
      work.copy_(in);
      std::vector<ReduceSegment> segments{{work, op}};
      ring_reduce_scatter(segments, PackedWire::fields, "reduce_scatter");
      out.copy_(work.view_flat(rank_ * out.numel(), out.shape()));
      if (op == ReduceOp::avg) divide(out, size_);
    });
  }

  void barrier() override {
    launch("barrier", Tensor(), [] { MPI_Barrier(MPI_COMM_WORLD); })->wait();
  }

 private:
  // The collective the communication thread is running. Its messages carry a tag made of its kind
  // and its sequence number, and every receive checks tag and size before taking the data, so
  // ranks whose collectives do not match (a bug: every rank must launch the same collectives, in
  // the same order, of the same sizes) stop with a message naming both sides instead of an
  // MPI_ERR_TRUNCATE abort, a hang, or silently mixed-up data.
  struct Running {
    const char* name = "";
    int64_t elements = 0;
    DType dtype = DType::f32;
    uint64_t sequence = 0;  // the next collective's number: the running one's plus one
    int tag = 0;
  };

  static int kind_of(const char* collective) {
    const char* kinds[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"};
    for (int k = 0; k < 5; ++k) {
      if (std::strcmp(kinds[k], collective) == 0) return k + 1;
    }
    return 0;
  }
  static const char* kind_name(int kind) {
    const char* kinds[] = {"?",          "all_reduce",     "broadcast",
                           "all_gather", "reduce_scatter", "barrier"};
    return kind >= 0 && kind <= 5 ? kinds[kind] : "?";
  }
  // Tags hold 3 bits of kind and as many bits of the sequence number as MPI_TAG_UB allows (at
  // least 12; 28 with OpenMPI).
  int make_tag(int kind, uint64_t sequence) const {
    return static_cast<int>((static_cast<uint64_t>(kind) << sequence_bits_) |
                            (sequence & ((uint64_t(1) << sequence_bits_) - 1)));
  }

  WorkPtr launch(const char* collective, const Tensor& shape, std::function<void()> task) {
    return launch(collective, shape.defined() ? shape.numel() : 0,
                  shape.defined() ? shape.dtype() : DType::u8, std::move(task));
  }
  // `elements` and `dtype` describe the collective in the message of a mismatch.
  WorkPtr launch(const char* collective, int64_t elements, DType dtype,
                 std::function<void()> task) {
    auto work = std::make_shared<MpiWork>(collective, timeout_s(), rank_, size_, progress_);
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.emplace_back(
        [this, task = std::move(task), work, collective, elements, dtype]() mutable {
          progress_->running = collective;
          progress_->running_since = Clock::now().time_since_epoch().count();
          running_.name = collective;
          running_.elements = elements;
          running_.dtype = dtype;
          running_.tag = make_tag(kind_of(collective), running_.sequence++);
          if (!failure_.empty()) {
            const std::string why = fmt::format(
                "rank {}: {} cannot run: an earlier collective of this process group "
                "failed, which leaves the ranks out of step: {}",
                rank_, collective, failure_);
            work->finish(why);
            return;
          }
          // The CPU is counted before the work is finished: a rank that reads the counter after
          // its wait returns then sees this collective's time.
          const double cpu_before = thread_cpu_seconds();
          try {
            task();
            count_communication_cpu(thread_cpu_seconds() - cpu_before);
            work->finish("");
          } catch (const std::exception& e) {
            // A send this task posted may still be reading its buffers (MPI cannot cancel a send):
            // the task, which holds them, is kept, and the group runs no more collectives.
            count_communication_cpu(thread_cpu_seconds() - cpu_before);
            failure_ = *e.what() ? e.what() : "an error without a message";
            abandoned_.push_back(std::move(task));
            work->finish(failure_);
          } catch (...) {
            count_communication_cpu(thread_cpu_seconds() - cpu_before);
            failure_ =
                fmt::format("{} failed with an exception that is not a std::exception", collective);
            abandoned_.push_back(std::move(task));
            work->finish(failure_);
          }
        });
    queue_cv_.notify_all();
    return work;
  }

  void run_queue() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and everything launched has run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
    library_.reset();
    if (owns_mpi_) MPI_Finalize();
  }

  // Polls `done` until it is true without holding a core. MPI's blocking calls poll in a busy
  // loop, and this thread waits for the network while the compute thread runs backward: with as
  // many ranks as cores, a spinning wait takes half of the compute thread's core (a 2-rank GPT
  // step took twice its compute time). A short spin catches a message already arriving; then the
  // thread sleeps between polls, at most 200 us, so that a transfer, which MPI only advances
  // inside its calls, still moves at 10 Gbit/s and more through the socket buffers. The spin is
  // 10 polls: with 100, 8 ranks on 2 cores spent a third more CPU on communication for the same
  // step time (docs/results.md, "What eight ranks on two cores cost").
  template <class Done>
  void wait_without_spinning(Done done) {
    for (int spin = 0; spin < 10; ++spin) {
      if (done()) return;
    }
    auto pause = std::chrono::microseconds(10);
    while (!done()) {
      std::this_thread::sleep_for(pause);
      count_wakeup();
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }

  void wait_for(MPI_Request& request) {
    wait_without_spinning([&] {
      int finished = 0;
      MPI_Test(&request, &finished, MPI_STATUS_IGNORE);
      return finished != 0;
    });
  }

  // Whether a receive knows its message's size, or only the most it can be (coded pieces).
  enum class Size { exact, at_most };

  // Receives n bytes (Size::at_most: up to n) of the running collective from rank `from`, after
  // checking that the next message from it belongs to the same collective and has that size;
  // returns the bytes received.
  int64_t receive_checked(void* recv, int64_t n, int from, Size size = Size::exact) {
    MPI_Status status;
    wait_without_spinning([&] {
      int arrived = 0;
      MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, &status);
      return arrived != 0;
    });
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    if (status.MPI_TAG != running_.tag || bytes > n || (size == Size::exact && bytes != n)) {
      const uint64_t mask = (uint64_t(1) << sequence_bits_) - 1;
      PAC_FAIL(
          "rank {}: the ranks' collectives do not match: this rank runs {} #{} ({} {} values) and "
          "expects {}{} bytes from rank {}, which sent {} bytes of its {} #{}. Every rank must run "
          "the same collectives in the same order and of the same sizes",
          rank_, running_.name, (running_.sequence - 1) & mask, running_.elements,
          dtype_name(running_.dtype), size == Size::exact ? "" : "at most ", n, from, bytes,
          kind_name(status.MPI_TAG >> sequence_bits_),
          static_cast<uint64_t>(status.MPI_TAG) & mask);
    }
    MPI_Request received;
    MPI_Irecv(recv, bytes, MPI_BYTE, from, status.MPI_TAG, MPI_COMM_WORLD, &received);
    wait_for(received);
    return bytes;
  }

  // Sends n_send bytes to `to` while receiving n_recv bytes (or up to them) from `from`; returns
  // the bytes received.
  int64_t exchange(const void* send, int64_t n_send, int to, void* recv, int64_t n_recv, int from,
                   const char* collective, Size size = Size::exact) {
    PAC_CHECK(n_send <= INT32_MAX && n_recv <= INT32_MAX,
              "{}: a ring step of {} bytes exceeds MPI's 2 GiB message limit; use smaller buckets",
              collective, std::max(n_send, n_recv));
    MPI_Request sent;
    MPI_Isend(send, static_cast<int>(n_send), MPI_BYTE, to, running_.tag, MPI_COMM_WORLD, &sent);
    const int64_t got = receive_checked(recv, n_recv, from, size);
    wait_for(sent);
    count_bytes(collective, static_cast<uint64_t>(n_send));
    count_exchange();
    return got;
  }

  // After sending a message: the share of each segment with a purpose.
  void count_purposes(const std::vector<Piece>& pieces, const Outgoing& sent) {
    for (size_t i = 0; i < pieces.size(); ++i)
      count_purpose(pieces[i].purpose, static_cast<uint64_t>(sent.piece_bytes[i]));
  }

  // Sends `out` to `to` while receiving `in` from `from`, then applies what arrived.
  void exchange_pieces(const std::vector<Piece>& out, int to, const std::vector<Piece>& in,
                       int from, Arrival how, const char* collective) {
    const Outgoing message = pack_pieces(out, outgoing_);
    const int64_t most = most_wire_bytes(in);
    char* received = incoming_buffer(most);
    const int64_t got = exchange(message.data, message.bytes, to, received, most, from, collective,
                                 any_coded(in) ? Size::at_most : Size::exact);
    count_purposes(out, message);
    unpack_pieces(in, received, got, how);
  }

  char* incoming_buffer(int64_t bytes) {
    incoming_.resize(std::max(incoming_.size(), static_cast<size_t>(bytes)));
    return incoming_.data();
  }

  // Ring reduce-scatter in place: afterwards this rank's chunk `rank_` of every segment holds the
  // reduction. In step s the chunks that travel hold the sums of s + 1 ranks.
  void ring_reduce_scatter(std::vector<ReduceSegment>& segments, PackedWire wire,
                           const char* collective) {
    if (size_ == 1) return;
    int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    for (int s = 0; s < size_ - 1; ++s) {
      auto pieces = [&](int c) {
        return travelling(chunk_pieces(segments, c, size_), s + 1, size_, wire);
      };
      exchange_pieces(pieces((rank_ - s - 1 + 2 * size_) % size_), next,
                      pieces((rank_ - s - 2 + 2 * size_) % size_), prev, Arrival::add, collective);
    }
  }

  // Ring all-gather of the chunks: rank r contributes chunk r of every segment.
  void ring_all_gather_chunks(std::vector<ReduceSegment>& segments, PackedWire wire,
                              const char* collective) {
    int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    for (int s = 0; s < size_ - 1; ++s) {
      auto pieces = [&](int c) {
        return travelling(chunk_pieces(segments, c, size_), size_, size_, wire);
      };
      const std::vector<Piece> out = pieces((rank_ - s + size_) % size_);
      const std::vector<Piece> in = pieces((rank_ - s - 1 + size_) % size_);
      if (in.size() == 1 && !in.front().coded) {  // received in place
        const Outgoing message = pack_pieces(out, outgoing_);
        exchange(message.data, message.bytes, next, in.front().data, in.front().stored_bytes(),
                 prev, collective, Size::exact);
        count_purposes(out, message);
      } else {
        exchange_pieces(out, next, in, prev, Arrival::replace, collective);
      }
    }
  }

  // The library's MPI_Iallreduce of every segment, then one wait for all of them.
  void library_all_reduce(std::vector<ReduceSegment>& segments) {
    std::vector<MPI_Request> requests = library_->start(segments);
    wait_without_spinning([&] {
      int finished = 0;
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &finished,
                  MPI_STATUSES_IGNORE);
      return finished != 0;
    });
  }

  // Recursive doubling: in round k every rank swaps its whole message with the rank whose number
  // differs in bit k and reduces, so after log2 P rounds every rank holds the reduction. Both
  // partners compute a op b, which IEEE arithmetic makes the same on each, so every rank ends
  // with the same bits. Where P is not a power of two, the first 2 (P - q) ranks (q the largest
  // power of two below P) pair up beforehand: the even one hands its message to the odd one and
  // gets the result back at the end. Packed fields travel in the width of the sums so far: one
  // rank's before the pairing, at most 2^(k+1) ranks' in round k.
  void doubling_all_reduce(std::vector<ReduceSegment>& segments, PackedWire wire) {
    if (size_ == 1) return;
    std::vector<Piece> pieces;
    for (auto& s : segments) pieces.push_back(whole_piece(s));
    const int64_t bytes = most_wire_bytes(pieces);
    // Several segments are reduced in a packed copy (their pieces then point into it).
    std::vector<Piece> work = pieces;
    if (pieces.size() > 1) {
      const Outgoing copy = pack_pieces(pieces, outgoing_);
      doubling_message_.assign(copy.data, copy.data + bytes);
      char* at = doubling_message_.data();
      for (auto& p : work) {
        p.data = at;
        at += p.stored_bytes();
      }
    }
    int q = 1;
    while (q * 2 <= size_) q *= 2;
    const int extra = size_ - q;
    int virtual_rank = rank_ - extra;
    if (rank_ < 2 * extra) {
      const std::vector<Piece> own = travelling(work, 1, size_, wire);
      if (rank_ % 2 == 0) {
        const Outgoing message = pack_pieces(own, outgoing_);
        send_only(message.data, message.bytes, rank_ + 1);
        count_purposes(own, message);
        virtual_rank = -1;
      } else {
        const int64_t most = most_wire_bytes(own);
        char* received = incoming_buffer(most);
        const int64_t got = receive_checked(received, most, rank_ - 1,
                                            any_coded(own) ? Size::at_most : Size::exact);
        count_exchange();
        unpack_pieces(own, received, got, Arrival::add);
        virtual_rank = rank_ / 2;
      }
    }
    if (virtual_rank >= 0) {
      for (int bit = 1; bit < q; bit <<= 1) {
        const int partner_virtual = virtual_rank ^ bit;
        const int partner =
            partner_virtual < extra ? 2 * partner_virtual + 1 : partner_virtual + extra;
        // Each partner holds the sums of `bit` virtual ranks, each of one or two ranks.
        const std::vector<Piece> sums = travelling(work, extra > 0 ? 2 * bit : bit, size_, wire);
        exchange_pieces(sums, partner, sums, partner, Arrival::add, "all_reduce");
      }
    }
    if (rank_ < 2 * extra) {
      const std::vector<Piece> all = travelling(work, size_, size_, wire);
      if (rank_ % 2 == 1) {
        const Outgoing message = pack_pieces(all, outgoing_);
        send_only(message.data, message.bytes, rank_ - 1);
        count_purposes(all, message);
      } else {
        const int64_t most = most_wire_bytes(all);
        char* received = incoming_buffer(most);
        const int64_t got = receive_checked(received, most, rank_ + 1,
                                            any_coded(all) ? Size::at_most : Size::exact);
        count_exchange();
        unpack_pieces(all, received, got, Arrival::replace);
      }
    }
    if (pieces.size() > 1) {
      for (size_t i = 0; i < pieces.size(); ++i)
        std::memcpy(pieces[i].data, work[i].data, pieces[i].stored_bytes());
    }
  }

  void send_only(const void* data, int64_t n, int to) {
    MPI_Request sent;
    MPI_Isend(data, static_cast<int>(n), MPI_BYTE, to, running_.tag, MPI_COMM_WORLD, &sent);
    wait_for(sent);
    count_bytes("all_reduce", static_cast<uint64_t>(n));
    count_exchange();
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::thread thread_;
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::function<void()> > queue_;
  bool stopping_ = false;
  bool started_ = false;
  // Receive and packed-send buffers, kept across calls (this runs for every bucket of every
  // step); only the communication thread uses them.
  std::vector<char> incoming_, outgoing_, doubling_message_;
  Running running_;  // only the communication thread uses it
  std::shared_ptr<Progress> progress_ = std::make_shared<Progress>();
  // After a collective fails: its error, and its task with the buffers it may still be sending
  // from (only the communication thread uses these).
  std::string failure_;
  std::vector<std::function<void()> > abandoned_;
  std::unique_ptr<LibraryAllReduce> library_;  // for AllReduceAlgorithm::mpi
  bool owns_mpi_ = false;                      // MPI was initialised here, so it is finalised here
  int sequence_bits_ = 12;
  std::exception_ptr init_error_;
};

}  // namespace

ProcessGroupPtr make_mpi_group() { return std::make_shared<MpiGroup>(); }

#endif

}  // namespace pac::comm
